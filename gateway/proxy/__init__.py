"""The way out: the formation proxy (``formation``, with ``proxy_errors``,
``virtual_names``, ``formation_headers``, ``door_addresses`` and ``formation_client``),
the forward proxy for agents in processes of their own (``forward``, with
``forward_request``, ``forward_relay`` and ``forward_tunnel``), the allow-list
(``egress``), call-member (``call_member``, with ``call_failed``, ``pending_answer``
(shared with delegated children) and ``member_rpc``),
the aiohttp transport and the agent's proxy variables (``env``).
"""
