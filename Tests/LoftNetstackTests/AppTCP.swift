import Glibc
import LoftCore

/// One TCP segment lwIP sent (or any IPv4/IPv6 TCP packet), parsed.
struct Segment: CustomStringConvertible {
    var source: Endpoint
    var destination: Endpoint
    var seq: UInt32
    var ack: UInt32
    var flags: UInt8
    var window: UInt16
    var payload: [UInt8]
    /// The MSS and window scale options, when present (SYNs).
    var mss: UInt16?
    var windowScale: UInt8?

    var isSYN: Bool { flags & PacketSummary.tcpSYN != 0 }
    var isACK: Bool { flags & PacketSummary.tcpACK != 0 }
    var isFIN: Bool { flags & PacketSummary.tcpFIN != 0 }
    var isRST: Bool { flags & PacketSummary.tcpRST != 0 }

    var description: String {
        var f = ""
        if isSYN { f += "S" }
        if isACK { f += "A" }
        if isFIN { f += "F" }
        if isRST { f += "R" }
        return "\(source) > \(destination) [\(f)] seq \(seq) ack \(ack) win \(window) len \(payload.count)"
    }

    /// Parses a whole IP packet; nil unless it is TCP with valid IP and TCP checksums.
    static func parse(_ packet: [UInt8]) -> Segment? {
        packet.withUnsafeBytes { p -> Segment? in
            guard case .success(let s) = PacketSummary.parse(p, maxLength: 65535),
                  s.proto == IPProtocol.tcp, s.transportChecksumIsValid(p) else { return nil }
            let t = s.transportOffset
            let dataOffset = Int(p[t + 12] >> 4) * 4
            var mss: UInt16?
            var windowScale: UInt8?
            var o = t + 20
            // Options: MSS and window scale are read; NOP and end-of-list are skipped.
            while o < t + dataOffset {
                let kind = p[o]
                if kind == 0 { break }
                if kind == 1 { o += 1; continue }
                guard o + 1 < t + dataOffset else { break }
                let len = Int(p[o + 1])
                if kind == 2 && len == 4 { mss = UInt16(p[o + 2]) << 8 | UInt16(p[o + 3]) }
                if kind == 3 && len == 3 { windowScale = p[o + 2] }
                o += max(len, 2)
            }
            return Segment(source: Endpoint(s.source, s.sourcePort), destination: Endpoint(s.destination, s.destinationPort),
                           seq: be32(p, t + 4), ack: be32(p, t + 8), flags: p[t + 13],
                           window: UInt16(p[t + 14]) << 8 | UInt16(p[t + 15]),
                           payload: Array(p[(t + dataOffset)...]), mss: mss, windowScale: windowScale)
        }
    }
}

func be32(_ p: UnsafeRawBufferPointer, _ i: Int) -> UInt32 {
    UInt32(p[i]) << 24 | UInt32(p[i + 1]) << 16 | UInt32(p[i + 2]) << 8 | UInt32(p[i + 3])
}

private func put16(_ b: inout [UInt8], _ i: Int, _ v: UInt16) {
    b[i] = UInt8(v >> 8); b[i + 1] = UInt8(v & 0xFF)
}

private func put32(_ b: inout [UInt8], _ i: Int, _ v: UInt32) {
    b[i] = UInt8(v >> 24); b[i + 1] = UInt8(v >> 16 & 0xFF); b[i + 2] = UInt8(v >> 8 & 0xFF); b[i + 3] = UInt8(v & 0xFF)
}

/// A whole IPv4/IPv6 TCP packet from `source` to `destination`, checksums filled in.
func tcpPacket(from source: Endpoint, to destination: Endpoint, seq: UInt32, ack: UInt32, flags: UInt8,
               window: UInt16, payload: [UInt8] = [], mss: UInt16? = nil, windowScale: UInt8? = nil) -> [UInt8] {
    let optionBytes = (mss == nil ? 0 : 4) + (windowScale == nil ? 0 : 4)
    var t = [UInt8](repeating: 0, count: 20 + optionBytes)
    put16(&t, 0, source.port)
    put16(&t, 2, destination.port)
    put32(&t, 4, seq)
    put32(&t, 8, ack)
    t[12] = UInt8((20 + optionBytes) / 4) << 4
    t[13] = flags
    put16(&t, 14, window)
    var o = 20
    if let mss {
        t[o] = 2; t[o + 1] = 4
        put16(&t, o + 2, mss)
        o += 4
    }
    if let windowScale {
        t[o] = 1; t[o + 1] = 3; t[o + 2] = 3; t[o + 3] = windowScale
    }
    t += payload
    let sum = t.withUnsafeBytes {
        InternetChecksum.transport(source: source.address, destination: destination.address, proto: IPProtocol.tcp, segment: $0)
    }
    put16(&t, 16, sum)
    return PacketBuilder.ipPacket(source: source.address, destination: destination.address, proto: IPProtocol.tcp, payload: t)
}

/// The app's side of one TCP connection, as a value: builds its segments with correct
/// sequence numbers and checksums and tracks what lwIP sent back (in-order data only; the
/// tests' link never loses or reorders packets).
struct AppTCP {
    let local: Endpoint       // the app's endpoint
    let remote: Endpoint      // where it connects (the flow's destination)
    let isn: UInt32
    var sndNxt: UInt32
    /// Next byte expected from lwIP (0 until the SYN-ACK).
    var rcvNxt: UInt32 = 0
    /// The receive window this app advertises in every segment it sends.
    var window: UInt16 = 65535
    var received: [UInt8] = []
    var synAckSeen = false
    var finReceived = false
    var rstReceived = false
    /// lwIP's last advertised window and cumulative ACK.
    var peerWindow: UInt16 = 0
    var peerAck: UInt32 = 0
    /// Bytes that arrived out of order or beyond what was expected (should stay 0).
    var unexpected = 0

    init(local: Endpoint, remote: Endpoint, isn: UInt32 = 1_000_000) {
        self.local = local
        self.remote = remote
        self.isn = isn
        self.sndNxt = isn
    }

    private func packet(_ flags: UInt8, seq: UInt32, payload: [UInt8] = [], mss: UInt16? = nil) -> [UInt8] {
        tcpPacket(from: local, to: remote, seq: seq, ack: flags & PacketSummary.tcpACK != 0 ? rcvNxt : 0,
                  flags: flags, window: window, payload: payload, mss: mss)
    }

    /// The opening SYN (MSS 1460, no window scaling); again for a retransmission.
    mutating func syn() -> [UInt8] {
        sndNxt = isn &+ 1
        return packet(PacketSummary.tcpSYN, seq: isn, mss: 1460)
    }

    /// A pure ACK of everything received, with the current window.
    func ackPacket() -> [UInt8] { packet(PacketSummary.tcpACK, seq: sndNxt) }

    /// Data, sent in one segment.
    mutating func data(_ bytes: [UInt8]) -> [UInt8] {
        let p = packet(PacketSummary.tcpACK | 0x08, seq: sndNxt, payload: bytes)
        sndNxt = sndNxt &+ UInt32(bytes.count)
        return p
    }

    mutating func fin() -> [UInt8] {
        let p = packet(PacketSummary.tcpFIN | PacketSummary.tcpACK, seq: sndNxt)
        sndNxt = sndNxt &+ 1
        return p
    }

    func rst() -> [UInt8] { packet(PacketSummary.tcpRST | PacketSummary.tcpACK, seq: sndNxt) }

    /// Whether a segment belongs to this connection (lwIP → app).
    func owns(_ s: Segment) -> Bool { s.source == remote && s.destination == local }

    /// Takes one segment from lwIP: the SYN-ACK, in-order data, FIN, RST.
    mutating func receive(_ s: Segment) {
        if s.isRST { rstReceived = true; return }
        if s.isACK { peerAck = s.ack; peerWindow = s.window }
        if s.isSYN {
            synAckSeen = true
            rcvNxt = s.seq &+ 1
            return
        }
        if !s.payload.isEmpty {
            if s.seq == rcvNxt {
                received += s.payload
                rcvNxt = rcvNxt &+ UInt32(s.payload.count)
            } else if Int32(bitPattern: s.seq &- rcvNxt) < 0 {
                // A retransmission of bytes already held: keep only what is new.
                let old = Int(rcvNxt &- s.seq)
                if old < s.payload.count {
                    received += s.payload[old...]
                    rcvNxt = rcvNxt &+ UInt32(s.payload.count - old)
                }
            } else {
                unexpected += s.payload.count
            }
        }
        if s.isFIN && s.seq &+ UInt32(s.payload.count) == rcvNxt {
            finReceived = true
            rcvNxt = rcvNxt &+ 1
        }
    }
}

/// A whole IPv4/IPv6 UDP packet, checksum filled in.
func udpPacket(from source: Endpoint, to destination: Endpoint, payload: [UInt8]) -> [UInt8] {
    let len = 8 + payload.count
    var u = [UInt8](repeating: 0, count: 8) + payload
    put16(&u, 0, source.port)
    put16(&u, 2, destination.port)
    put16(&u, 4, UInt16(len))
    let sum = u.withUnsafeBytes {
        InternetChecksum.transport(source: source.address, destination: destination.address, proto: IPProtocol.udp, segment: $0)
    }
    put16(&u, 6, sum == 0 ? 0xFFFF : sum)
    return PacketBuilder.ipPacket(source: source.address, destination: destination.address, proto: IPProtocol.udp, payload: u)
}

/// One UDP datagram lwIP sent, parsed; nil unless UDP with valid checksums.
struct Datagram {
    var source: Endpoint
    var destination: Endpoint
    var payload: [UInt8]

    static func parse(_ packet: [UInt8]) -> Datagram? {
        packet.withUnsafeBytes { p -> Datagram? in
            guard case .success(let s) = PacketSummary.parse(p, maxLength: 65535),
                  s.proto == IPProtocol.udp, s.transportChecksumIsValid(p) else { return nil }
            return Datagram(source: Endpoint(s.source, s.sourcePort), destination: Endpoint(s.destination, s.destinationPort),
                            payload: Array(p[(s.transportOffset + 8)...]))
        }
    }
}

/// An ICMP/ICMPv6 message lwIP or loft sent: type, code and the quoted packet.
struct ICMPMessage {
    var source: IPAddress
    var destination: IPAddress
    var type: UInt8
    var code: UInt8
    var quote: [UInt8]

    static func parse(_ packet: [UInt8]) -> ICMPMessage? {
        packet.withUnsafeBytes { p -> ICMPMessage? in
            guard case .success(let s) = PacketSummary.parse(p, maxLength: 65535),
                  s.proto == IPProtocol.icmp || s.proto == IPProtocol.icmpv6, s.transportChecksumIsValid(p) else { return nil }
            let t = s.transportOffset
            return ICMPMessage(source: s.source, destination: s.destination, type: p[t], code: p[t + 1],
                               quote: Array(p[(t + 8)...]))
        }
    }
}
