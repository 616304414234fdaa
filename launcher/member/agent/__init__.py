"""The agent process of a member (docs/agent-protocol.md): :mod:`.protocol` is the wire,
:mod:`.host` the process itself; the runtime's side is ``launcher.member.agent_process``."""
