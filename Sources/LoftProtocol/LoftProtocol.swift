// The loft session protocol: frame codec and session state machines (see docs/protocol.md).
