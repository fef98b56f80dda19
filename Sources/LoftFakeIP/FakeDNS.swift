import LoftCore
import LoftSniff

/// A DNS query as an app sends it (RFC 1035 §4.1): one question, read without compression;
/// and the answer loft gives for a name it maps to its pool. Sans-IO.
public struct DNSQuery: Equatable, Sendable {
    public static let typeA: UInt16 = 1
    public static let typeAAAA: UInt16 = 28

    public var id: UInt16
    /// The query's RD bit, echoed.
    public var recursionDesired: Bool
    /// Lowercased, no trailing dot; nil when the name is not a host name (`HostName`).
    public var name: String?
    public var type: UInt16
    public var qclass: UInt16
    /// Where the question ends (the answer copies the header's question from 12 to here).
    public var questionEnd: Int

    /// A standard query (QR 0, opcode 0) with exactly one question; nil for anything else.
    /// `response`: a standard response (QR 1, NOERROR) to one, its question read the same way
    /// (the answers are c-ares's to read: `DNSWire.answer`).
    public static func parse(_ b: UnsafeRawBufferPointer, response: Bool = false) -> DNSQuery? {
        guard b.count >= 12 + 5, b.count <= (response ? 65535 : 4096) else { return nil }
        let flags = UInt16(b[2]) << 8 | UInt16(b[3])
        guard (flags & 0x8000 != 0) == response, (flags >> 11) & 0xF == 0 else { return nil }
        if response && flags & 0xF != 0 { return nil }
        let qd = UInt16(b[4]) << 8 | UInt16(b[5])
        let an = UInt16(b[6]) << 8 | UInt16(b[7])
        let ns = UInt16(b[8]) << 8 | UInt16(b[9])
        guard qd == 1, response || (an == 0 && ns == 0) else { return nil }
        var at = 12
        var text: [UInt8] = []
        while true {
            guard at < b.count else { return nil }
            let n = Int(b[at])
            at += 1
            if n == 0 { break }
            guard n <= 63, at + n <= b.count, text.count + n + 1 <= 255 else { return nil }  // no pointers in a question
            if !text.isEmpty { text.append(UInt8(ascii: ".")) }
            text += b[at..<(at + n)]
            at += n
        }
        guard at + 4 <= b.count else { return nil }
        let type = UInt16(b[at]) << 8 | UInt16(b[at + 1])
        let qclass = UInt16(b[at + 2]) << 8 | UInt16(b[at + 3])
        let name = text.isEmpty ? nil : text.withUnsafeBytes { HostName.validate($0) }
        return DNSQuery(id: UInt16(b[0]) << 8 | UInt16(b[1]), recursionDesired: flags & 0x0100 != 0, name: name,
                        type: type, qclass: qclass, questionEnd: at + 4)
    }

    /// The response to `query` (its bytes `b`): NOERROR, the question copied, one answer per
    /// address of the query's type (none: an empty answer, "no data"), each with `ttl`.
    public static func answer(_ b: UnsafeRawBufferPointer, query: DNSQuery, addresses: [IPAddress], ttl: UInt32) -> [UInt8] {
        let fitting = addresses.filter { query.type == typeA ? $0.isIPv4 : !$0.isIPv4 }
        var out: [UInt8] = [UInt8(query.id >> 8), UInt8(query.id & 0xFF),
                            0x80 | (query.recursionDesired ? 0x01 : 0), 0x80,
                            0, 1, 0, UInt8(fitting.count), 0, 0, 0, 0]
        out += b[12..<query.questionEnd]
        for a in fitting {
            out += [0xC0, 0x0C, UInt8(query.type >> 8), UInt8(query.type & 0xFF), 0, 1,
                    UInt8(ttl >> 24), UInt8((ttl >> 16) & 0xFF), UInt8((ttl >> 8) & 0xFF), UInt8(ttl & 0xFF)]
            var rdata = [UInt8](repeating: 0, count: 16)
            let n = rdata.withUnsafeMutableBytes { a.write(to: $0.baseAddress!) }
            out += [0, UInt8(n)]
            out += rdata[0..<n]
        }
        return out
    }
}
