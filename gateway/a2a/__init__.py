"""The A2A 1.0 wire without a door: its models (``models``), JSON-RPC framing and the
one error table (``jsonrpc``), and the HTTP+JSON routes (``rest_routes``).
"""
