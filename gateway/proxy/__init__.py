"""The way out: the formation proxy (``formation``), the forward proxy for agents in
processes of their own (``forward``), the allow-list (``egress``), call-member
(``call_member``), the aiohttp transport and the agent's proxy variables (``env``).
"""
