"""The trace: the bus every record goes through (``bus``) and W3C trace context
(``context``).
"""
