import LoftCore

// Frame codec of version 1. docs/protocol.md has the byte tables; this file is the one place
// that reads or writes them. The sessions use `WireFormat` directly so DATA and DGRAM bodies
// are handled in place; `FrameDecoder` / `FrameEncoder` are the general entry points.

/// A validated frame header.
struct FrameHeader {
    var type: FrameType
    var stream: UInt32
    var length: Int
}

/// Reads the fields of one frame body; every read past the end is `truncatedBody`.
struct BodyReader {
    let body: UnsafeRawBufferPointer
    let type: FrameType
    var pos = 0

    init(_ body: UnsafeRawBufferPointer, _ type: FrameType) { self.body = body; self.type = type }

    var remaining: Int { body.count - pos }

    @inline(__always)
    private func need(_ n: Int) throws(ProtocolError) {
        if remaining < n { throw .truncatedBody(type) }
    }

    mutating func u8() throws(ProtocolError) -> UInt8 {
        try need(1)
        defer { pos += 1 }
        return body[pos]
    }

    mutating func u16() throws(ProtocolError) -> UInt16 {
        try need(2)
        defer { pos += 2 }
        return UInt16(bigEndian: body.loadUnaligned(fromByteOffset: pos, as: UInt16.self))
    }

    mutating func u32() throws(ProtocolError) -> UInt32 {
        try need(4)
        defer { pos += 4 }
        return UInt32(bigEndian: body.loadUnaligned(fromByteOffset: pos, as: UInt32.self))
    }

    mutating func u64() throws(ProtocolError) -> UInt64 {
        try need(8)
        defer { pos += 8 }
        return UInt64(bigEndian: body.loadUnaligned(fromByteOffset: pos, as: UInt64.self))
    }

    mutating func bytes(_ n: Int) throws(ProtocolError) -> UnsafeRawBufferPointer {
        try need(n)
        defer { pos += n }
        return UnsafeRawBufferPointer(rebasing: body[pos..<pos + n])
    }

    mutating func rest() -> UnsafeRawBufferPointer {
        defer { pos = body.count }
        return UnsafeRawBufferPointer(rebasing: body[pos...])
    }

    /// Bytes left after the last field make the length wrong.
    func end() throws(ProtocolError) {
        if pos != body.count { throw .badLength(type, body.count) }
    }

    mutating func ipv4() throws(ProtocolError) -> IPAddress { IPAddress(ipv4Bytes: try bytes(4)) }
    mutating func ipv6() throws(ProtocolError) -> IPAddress { IPAddress(ipv6Bytes: try bytes(16)) }

    /// u8 (or u16) length, then UTF-8.
    mutating func string(_ field: String, wide: Bool = false, max: Int) throws(ProtocolError) -> String {
        let n = wide ? Int(try u16()) : Int(try u8())
        if n > max { throw .stringTooLong(field: field, length: n, max: max) }
        let raw = try bytes(n)
        guard let s = String(validating: raw, as: UTF8.self) else { throw .invalidUTF8(field: field) }
        return s
    }

    /// SOCKS5 address: ATYP, address, port.
    mutating func destination() throws(ProtocolError) -> Destination {
        let atyp = try u8()
        switch atyp {
        case 1:
            let a = try ipv4()
            return .ip(Endpoint(a, try u16()))
        case 4:
            let a = try ipv6()
            return .ip(Endpoint(a, try u16()))
        case 3:
            let n = Int(try u8())
            let raw = try bytes(n)
            guard n > 0, raw.allSatisfy({ $0 >= 0x21 && $0 <= 0x7E }) else { throw .badDomainName }
            let name = String(decoding: raw, as: UTF8.self)
            return .domain(name, try u16())
        default:
            throw .badAddressType(atyp)
        }
    }

    /// ATYP 1 or 4 and the address, no port (STATUS's DNS list).
    mutating func ipAddress() throws(ProtocolError) -> IPAddress {
        let atyp = try u8()
        switch atyp {
        case 1: return try ipv4()
        case 4: return try ipv6()
        default: throw .badAddressType(atyp)
        }
    }
}

enum WireFormat {
    /// STATUS flags bit 7: replay fields follow the DNS list (§8.1).
    static let statusReplayFlag: UInt8 = 0x80
    /// RESUME capabilities bit 1: the client kept its streams (§8.1).
    static let resumeContinuing: UInt32 = 2

    /// Checks the 8 header bytes at the start of `p` (at least 8 must be there). The length
    /// is checked against the type here, so a bad frame is refused before its body arrives.
    static func parseHeader(_ p: UnsafeRawBufferPointer) throws(ProtocolError) -> FrameHeader {
        let t = p[0]
        guard let type = FrameType(rawValue: t) else { throw .unknownType(t) }
        let flags = p[1]
        if flags != 0 { throw .reservedFlags(type, flags) }
        let stream = UInt32(bigEndian: p.loadUnaligned(fromByteOffset: 2, as: UInt32.self))
        if type.isStreamFrame == (stream == 0) { throw .badStreamID(type, stream) }
        let length = Int(UInt16(bigEndian: p.loadUnaligned(fromByteOffset: 6, as: UInt16.self)))
        try checkLength(type, length)
        return FrameHeader(type: type, stream: stream, length: length)
    }

    /// Smallest valid body per type (a body with the shortest variable fields).
    static func minimumLength(_ type: FrameType) -> Int {
        switch type {
        case .hello: return 7        // version, capabilities, two empty strings
        case .resume: return 18      // version, instance id, empty token
        case .status: return 37      // IPv4 only, no DNS
        case .open: return 6         // network, one-byte domain, port
        case .openOK, .fin: return 0
        case .openFail, .rst: return 1
        case .data: return 1
        case .credit: return 4
        case .dgram: return 5        // one-byte domain, port, empty payload
        case .ping, .pong, .ack: return 8
        case .goaway: return 3       // reason, empty text
        }
    }

    static func checkLength(_ type: FrameType, _ length: Int) throws(ProtocolError) {
        switch type {
        case .data:
            if length == 0 { throw .invalidValue(.data, field: "length") }
        case .openOK, .fin, .openFail, .rst, .credit, .ping, .pong, .ack:
            if length != minimumLength(type) { throw .badLength(type, length) }
        case .hello, .resume, .status, .open, .dgram, .goaway:
            if length < minimumLength(type) { throw .badLength(type, length) }
        }
    }

    static func version(_ v: UInt8) throws(ProtocolError) {
        if v != LoftWire.version { throw .unsupportedVersion(v) }
    }

    /// Decodes any body except that DATA's payload is copied into the frame (the sessions
    /// never call this for DATA).
    static func parseBody(_ h: FrameHeader, _ body: UnsafeRawBufferPointer) throws(ProtocolError) -> Frame {
        var r = BodyReader(body, h.type)
        let frame: Frame
        switch h.type {
        case .hello:
            try version(try r.u8())
            let caps = try r.u32()
            let token = try r.string("token", max: LoftWire.maxShortString)
            let name = try r.string("client name", max: LoftWire.maxShortString)
            frame = .hello(Hello(capabilities: caps, token: token, clientName: name))
        case .resume:
            try version(try r.u8())
            let id = InstanceID(bytes: try r.bytes(16))!
            let token = try r.string("token", max: LoftWire.maxShortString)
            var replay: ResumeReplay?
            if r.remaining > 0 {
                // Replay fields (§8.1): capabilities with bit 0 set, then the received count.
                let caps = try r.u32()
                let received = try r.u64()
                if caps & Hello.replay == 0 { throw .invalidValue(.resume, field: "capabilities") }
                let continuing = caps & Self.resumeContinuing != 0
                if !continuing && received != 0 { throw .invalidValue(.resume, field: "received") }
                replay = ResumeReplay(continuing: continuing, received: received)
            }
            frame = .resume(Resume(instanceID: id, token: token, replay: replay))
        case .status:
            frame = .status(try status(&r))
        case .open:
            let network: FlowNetwork
            switch try r.u8() {
            case 6: network = .tcp
            case 17: network = .udp
            default: throw .invalidValue(.open, field: "network")
            }
            frame = .open(stream: h.stream, network: network, destination: try r.destination())
        case .openOK:
            frame = .openOK(stream: h.stream)
        case .openFail:
            let reason = try r.u8()
            if reason == 0 { throw .invalidValue(.openFail, field: "reason") }
            frame = .openFail(stream: h.stream, reason: OpenFailReason(rawValue: reason))
        case .data:
            frame = .data(stream: h.stream, payload: Array(r.rest()))
        case .fin:
            frame = .fin(stream: h.stream)
        case .rst:
            frame = .rst(stream: h.stream, reason: RstReason(rawValue: try r.u8()))
        case .credit:
            let inc = try r.u32()
            if inc == 0 { throw .invalidValue(.credit, field: "increment") }
            frame = .credit(stream: h.stream, increment: inc)
        case .dgram:
            let remote = try r.destination()
            frame = .dgram(association: h.stream, remote: remote, payload: Array(r.rest()))
        case .ping:
            frame = .ping(try r.u64())
        case .pong:
            frame = .pong(try r.u64())
        case .ack:
            frame = .ack(try r.u64())
        case .goaway:
            let reason = GoAwayReason(rawValue: try r.u8())
            let text = try r.string("text", wide: true, max: LoftWire.maxGoAwayText)
            frame = .goaway(reason: reason, text: text)
        }
        try r.end()
        return frame
    }

    private static func status(_ r: inout BodyReader) throws(ProtocolError) -> Status {
        let id = InstanceID(bytes: try r.bytes(16))!
        let keepalive = try r.u32()
        if keepalive == 0 { throw .invalidValue(.status, field: "keepalive_ms") }
        let maxStreams = try r.u32()
        let mtu = try r.u16()
        let ip4 = try r.ipv4()
        let len4 = try r.u8()
        guard len4 <= 32, let prefix4 = IPPrefix(ip4, Int(len4)) else { throw .invalidValue(.status, field: "ipv4 prefix") }
        let gw4 = try r.ipv4()
        let flags = try r.u8()
        if flags & ~(1 | Self.statusReplayFlag) != 0 { throw .invalidValue(.status, field: "flags") }
        var prefix6: IPPrefix?, gw6: IPAddress?
        if flags & 1 != 0 {
            let ip6 = try r.ipv6()
            let len6 = try r.u8()
            guard len6 <= 128, let p = IPPrefix(ip6, Int(len6)) else { throw .invalidValue(.status, field: "ipv6 prefix") }
            prefix6 = p
            gw6 = try r.ipv6()
        }
        if mtu < (prefix6 == nil ? LoftWire.minMTU : LoftWire.minMTUWithIPv6) {
            throw .invalidValue(.status, field: "mtu")
        }
        let count = Int(try r.u8())
        if count > LoftWire.maxDNSServers { throw .invalidValue(.status, field: "dns count") }
        var dns: [IPAddress] = []
        dns.reserveCapacity(count)
        for _ in 0..<count { dns.append(try r.ipAddress()) }
        var replay: StatusReplay?
        if flags & Self.statusReplayFlag != 0 {
            let grace = try r.u32()
            let continued = try r.u8()
            if continued > 1 { throw .invalidValue(.status, field: "continued") }
            let received = try r.u64()
            if continued == 0 && received != 0 { throw .invalidValue(.status, field: "received") }
            replay = StatusReplay(graceMs: grace, continued: continued == 1, received: received)
        }
        return Status(instanceID: id, keepaliveMs: keepalive, maxStreams: maxStreams,
                      overlay: Overlay(ipv4: prefix4, gateway4: gw4, ipv6: prefix6, gateway6: gw6, mtu: mtu, dns: dns),
                      replay: replay)
    }

    // MARK: encoding

    /// Bytes of a SOCKS5 address; throws for what the decoder would refuse.
    static func destinationLength(_ d: Destination) throws(ProtocolError) -> Int {
        switch d {
        case .ip(let e): return e.address.isIPv4 ? 7 : 19
        case .domain(let name, _):
            let n = name.utf8.count
            if n == 0 { throw .badDomainName }
            if n > LoftWire.maxShortString { throw .stringTooLong(field: "domain", length: n, max: LoftWire.maxShortString) }
            for b in name.utf8 where b < 0x21 || b > 0x7E { throw .badDomainName }
            return 4 + n
        }
    }

    static func shortString(_ s: String, _ field: String) throws(ProtocolError) -> Int {
        let n = s.utf8.count
        if n > LoftWire.maxShortString { throw .stringTooLong(field: field, length: n, max: LoftWire.maxShortString) }
        return 1 + n
    }

    /// Validates `frame` and returns its body length.
    static func bodyLength(_ frame: Frame) throws(ProtocolError) -> Int {
        let type = frame.type
        if type.isStreamFrame && frame.stream == 0 { throw .badStreamID(type, 0) }
        let n: Int
        switch frame {
        case .hello(let h):
            try version(h.version)
            n = 5 + (try shortString(h.token, "token")) + (try shortString(h.clientName, "client name"))
        case .resume(let r):
            try version(r.version)
            if let rp = r.replay, !rp.continuing && rp.received != 0 { throw .invalidValue(.resume, field: "received") }
            n = 17 + (try shortString(r.token, "token")) + (r.replay == nil ? 0 : 12)
        case .status(let s):
            n = try statusLength(s)
        case .open(_, let network, let destination):
            if network != .tcp && network != .udp { throw .invalidValue(.open, field: "network") }
            n = 1 + (try destinationLength(destination))
        case .openOK, .fin:
            n = 0
        case .openFail(_, let reason):
            if reason.rawValue == 0 { throw .invalidValue(.openFail, field: "reason") }
            n = 1
        case .rst:
            n = 1
        case .data(_, let payload):
            if payload.isEmpty { throw .invalidValue(.data, field: "length") }
            n = payload.count
        case .credit(_, let inc):
            if inc == 0 { throw .invalidValue(.credit, field: "increment") }
            n = 4
        case .dgram(_, let remote, let payload):
            n = (try destinationLength(remote)) + payload.count
        case .ping, .pong, .ack:
            n = 8
        case .goaway(_, let text):
            let t = text.utf8.count
            if t > LoftWire.maxGoAwayText { throw .stringTooLong(field: "text", length: t, max: LoftWire.maxGoAwayText) }
            n = 3 + t
        }
        if n > LoftWire.maxBodySize { throw .badLength(type, n) }
        return n
    }

    static func statusLength(_ s: Status) throws(ProtocolError) -> Int {
        let o = s.overlay
        if s.keepaliveMs == 0 { throw .invalidValue(.status, field: "keepalive_ms") }
        guard o.ipv4.address.isIPv4 else { throw .invalidValue(.status, field: "ipv4 prefix") }
        guard o.gateway4.isIPv4 else { throw .invalidValue(.status, field: "gateway4") }
        var n = 37
        switch (o.ipv6, o.gateway6) {
        case (nil, nil):
            break
        case (let p?, let g?):
            guard !p.address.isIPv4, p.length <= 128 else { throw .invalidValue(.status, field: "ipv6 prefix") }
            guard !g.isIPv4 else { throw .invalidValue(.status, field: "gateway6") }
            n += 33
        default:
            throw .invalidValue(.status, field: "ipv6 prefix")
        }
        if o.mtu < (o.ipv6 == nil ? LoftWire.minMTU : LoftWire.minMTUWithIPv6) { throw .invalidValue(.status, field: "mtu") }
        if o.dns.count > LoftWire.maxDNSServers { throw .invalidValue(.status, field: "dns count") }
        for a in o.dns { n += a.isIPv4 ? 5 : 17 }
        if let rp = s.replay {
            if !rp.continued && rp.received != 0 { throw .invalidValue(.status, field: "received") }
            n += 13
        }
        return n
    }
}

/// Big-endian appends into the output array.
extension Array where Element == UInt8 {
    @inline(__always) mutating func put16(_ v: UInt16) {
        append(UInt8(truncatingIfNeeded: v >> 8)); append(UInt8(truncatingIfNeeded: v))
    }
    @inline(__always) mutating func put32(_ v: UInt32) {
        append(UInt8(truncatingIfNeeded: v >> 24)); append(UInt8(truncatingIfNeeded: v >> 16))
        append(UInt8(truncatingIfNeeded: v >> 8)); append(UInt8(truncatingIfNeeded: v))
    }
    @inline(__always) mutating func put64(_ v: UInt64) {
        put32(UInt32(truncatingIfNeeded: v >> 32)); put32(UInt32(truncatingIfNeeded: v))
    }
    mutating func putHeader(_ type: FrameType, _ stream: UInt32, _ length: Int) {
        append(type.rawValue); append(0); put32(stream); put16(UInt16(length))
    }
    mutating func putIP(_ a: IPAddress) {
        switch a {
        case .v4(let v): put32(v)
        case .v6(let hi, let lo): put64(hi); put64(lo)
        }
    }
    mutating func putShort(_ s: String) {
        append(UInt8(s.utf8.count)); append(contentsOf: s.utf8)
    }
    mutating func putDestination(_ d: Destination) {
        switch d {
        case .ip(let e):
            append(e.address.isIPv4 ? 1 : 4); putIP(e.address); put16(e.port)
        case .domain(let name, let port):
            append(3); putShort(name); put16(port)
        }
    }
}

/// Streaming frame decoder. Append what the carrier delivered, then call `next()` until it
/// returns nil: each header is checked as soon as its 8 bytes are in, and once `next()` has
/// returned nil the decoder holds less than one frame (at most `LoftWire.maxFrameSize - 1`
/// bytes).
public struct FrameDecoder {
    private var buffer = ByteQueue()

    public init() {}

    /// Bytes held that are not yet part of a returned frame.
    public var bufferedCount: Int { buffer.count }

    public mutating func append(_ bytes: UnsafeRawBufferPointer) {
        buffer.append(bytes)
    }

    public mutating func append(_ bytes: [UInt8]) {
        buffer.append(bytes)
    }

    /// The next whole frame, or nil when more bytes are needed. After a throw the decoder is
    /// stuck on the bad frame (the session is over anyway).
    public mutating func next() throws(ProtocolError) -> Frame? {
        guard buffer.count >= LoftWire.headerSize else { return nil }
        let result: Result<(Frame, Int)?, ProtocolError> = buffer.withUnsafeReadableBytes { p in
            do throws(ProtocolError) {
                let h = try WireFormat.parseHeader(p)
                let total = LoftWire.headerSize + h.length
                guard p.count >= total else { return .success(nil) }
                let body = UnsafeRawBufferPointer(rebasing: p[LoftWire.headerSize..<total])
                return .success((try WireFormat.parseBody(h, body), total))
            } catch {
                return .failure(error)
            }
        }
        guard let (frame, total) = try result.get() else { return nil }
        buffer.consume(total)
        return frame
    }

    /// The carrier ended: an error if it ended inside a frame.
    public func finish() throws(ProtocolError) {
        if !buffer.isEmpty { throw .incompleteFrame(buffered: buffer.count) }
    }
}

public enum FrameEncoder {
    /// Appends one frame; throws (appending nothing) for a frame the decoder would refuse.
    public static func encode(_ frame: Frame, into out: inout ByteQueue) throws(ProtocolError) {
        let n = try WireFormat.bodyLength(frame)
        out.withAppendableStorage(reserving: LoftWire.headerSize + n) { s in
            s.putHeader(frame.type, frame.stream, n)
            switch frame {
            case .hello(let h):
                s.append(h.version); s.put32(h.capabilities); s.putShort(h.token); s.putShort(h.clientName)
            case .resume(let r):
                s.append(r.version); s.append(contentsOf: r.instanceID.bytes); s.putShort(r.token)
                if let rp = r.replay {
                    s.put32(Hello.replay | (rp.continuing ? WireFormat.resumeContinuing : 0)); s.put64(rp.received)
                }
            case .status(let st):
                let o = st.overlay
                s.append(contentsOf: st.instanceID.bytes)
                s.put32(st.keepaliveMs); s.put32(st.maxStreams); s.put16(o.mtu)
                s.putIP(o.ipv4.address); s.append(UInt8(o.ipv4.length)); s.putIP(o.gateway4)
                let rflag = st.replay == nil ? 0 : WireFormat.statusReplayFlag
                if let p6 = o.ipv6, let g6 = o.gateway6 {
                    s.append(1 | rflag); s.putIP(p6.address); s.append(UInt8(p6.length)); s.putIP(g6)
                } else {
                    s.append(rflag)
                }
                s.append(UInt8(o.dns.count))
                for a in o.dns { s.append(a.isIPv4 ? 1 : 4); s.putIP(a) }
                if let rp = st.replay { s.put32(rp.graceMs); s.append(rp.continued ? 1 : 0); s.put64(rp.received) }
            case .open(_, let network, let destination):
                s.append(network == .tcp ? 6 : 17); s.putDestination(destination)
            case .openOK, .fin:
                break
            case .openFail(_, let reason):
                s.append(reason.rawValue)
            case .rst(_, let reason):
                s.append(reason.rawValue)
            case .data(_, let payload):
                s.append(contentsOf: payload)
            case .credit(_, let inc):
                s.put32(inc)
            case .dgram(_, let remote, let payload):
                s.putDestination(remote); s.append(contentsOf: payload)
            case .ping(let v), .pong(let v), .ack(let v):
                s.put64(v)
            case .goaway(let reason, let text):
                s.append(reason.rawValue); s.put16(UInt16(text.utf8.count)); s.append(contentsOf: text.utf8)
            }
        }
    }

    /// DATA straight from the caller's bytes (the sessions' send path): 1…65535 bytes.
    public static func encodeData(stream: UInt32, _ payload: UnsafeRawBufferPointer, into out: inout ByteQueue) {
        precondition(stream != 0 && !payload.isEmpty && payload.count <= LoftWire.maxBodySize,
                     "DATA needs a stream id and 1...65535 bytes")
        out.withAppendableStorage(reserving: LoftWire.headerSize + payload.count) { s in
            s.putHeader(.data, stream, payload.count)
            s.append(contentsOf: payload.assumingMemoryBound(to: UInt8.self))
        }
    }

    /// DGRAM straight from the caller's bytes; throws for a bad address or a body over 65535.
    public static func encodeDatagram(association: UInt32, remote: Destination, _ payload: UnsafeRawBufferPointer,
                                      into out: inout ByteQueue) throws(ProtocolError) {
        if association == 0 { throw .badStreamID(.dgram, 0) }
        let n = (try WireFormat.destinationLength(remote)) + payload.count
        if n > LoftWire.maxBodySize { throw .badLength(.dgram, n) }
        out.withAppendableStorage(reserving: LoftWire.headerSize + n) { s in
            s.putHeader(.dgram, association, n)
            s.putDestination(remote)
            if !payload.isEmpty { s.append(contentsOf: payload.assumingMemoryBound(to: UInt8.self)) }
        }
    }

    /// Bytes `encodeDatagram` would append, or nil if it would throw.
    public static func datagramSize(remote: Destination, payloadCount: Int) -> Int? {
        guard let a = try? WireFormat.destinationLength(remote), a + payloadCount <= LoftWire.maxBodySize else { return nil }
        return LoftWire.headerSize + a + payloadCount
    }
}
