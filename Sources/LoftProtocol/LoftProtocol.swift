// The loft session protocol: frame codec and session state machines (see docs/protocol.md).
//
// Sans-IO: nothing here touches a socket, a clock or a thread. The embedder (the holder
// outbound on the client, loft-front on the server) feeds received bytes and the current
// monotonic time in milliseconds, drains the bytes to send, and reacts to events.

/// Constants of protocol version 1. docs/protocol.md names each one.
public enum LoftWire {
    /// The only version this implementation speaks (HELLO and RESUME carry it first).
    public static let version: UInt8 = 1
    /// Bytes in every frame header: type u8, flags u8, stream u32, length u16.
    public static let headerSize = 8
    /// The largest body a frame can have (the length field is 16 bits).
    public static let maxBodySize = 65_535
    /// The largest frame: header plus the largest body. The decoder never buffers more.
    public static let maxFrameSize = headerSize + maxBodySize
    /// Send credit every stream starts with, in each direction (256 KiB).
    public static let initialStreamWindow: UInt32 = 262_144
    /// Longest token, client name and domain name (a u8 length prefix).
    public static let maxShortString = 255
    /// Longest GOAWAY text, in bytes.
    public static let maxGoAwayText = 1024
    /// Most DNS servers a STATUS may list.
    public static let maxDNSServers = 16
    /// Smallest MTU a STATUS may carry (1280 when it has IPv6).
    public static let minMTU: UInt16 = 576
    public static let minMTUWithIPv6: UInt16 = 1280
}
