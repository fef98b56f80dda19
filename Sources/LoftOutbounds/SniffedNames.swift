// A sniffed name goes to the far end of these outbounds (the loft protocol's OPEN and VLESS's
// request both carry names, as SOCKS5 does): the front or the VLESS server resolves it
// (docs/sniffing.md).
extension HolderOutbound {
    public var dialsSniffedNames: Bool { true }
}

extension VLESSOutbound {
    public var dialsSniffedNames: Bool { true }
}
