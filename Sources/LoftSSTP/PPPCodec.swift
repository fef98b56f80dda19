// PPP frames inside SSTP data packets (RFC 1661), sans-IO: no HDLC flags, escaping or FCS;
// the address and control bytes (FF 03) are sent and may be absent on receipt (ACFC), the
// protocol field is two bytes and may be one on receipt (PFC). LCP, IPCP and IPV6CP packets
// share one layout (code · identifier · length · data), and so do PAP and CHAP.

public enum PPP {
    public static let lcp: UInt16 = 0xC021
    public static let pap: UInt16 = 0xC023
    public static let chap: UInt16 = 0xC223
    public static let ipcp: UInt16 = 0x8021
    public static let ipv6cp: UInt16 = 0x8057
    public static let ipv4: UInt16 = 0x0021
    public static let ipv6: UInt16 = 0x0057

    /// The bytes in front of a packet of `proto`: FF 03 and the protocol.
    public static func header(_ proto: UInt16) -> (UInt8, UInt8, UInt8, UInt8) {
        (0xFF, 0x03, UInt8(proto >> 8), UInt8(proto & 0xFF))
    }

    /// A frame's protocol and where its information field starts; nil if the frame is too short
    /// or its protocol field is not a valid one (RFC 1661 2: the low bit of the last byte set,
    /// of the first byte clear).
    public static func parseFrame(_ frame: UnsafeRawBufferPointer) -> (proto: UInt16, offset: Int)? {
        var at = 0
        if frame.count >= 2 && frame[0] == 0xFF && frame[1] == 0x03 { at = 2 }
        guard at < frame.count else { return nil }
        if frame[at] & 1 == 1 { return (UInt16(frame[at]), at + 1) }  // compressed protocol field
        guard at + 1 < frame.count, frame[at + 1] & 1 == 1 else { return nil }
        return (UInt16(frame[at]) << 8 | UInt16(frame[at + 1]), at + 2)
    }

    /// Codes of LCP (all of them) and the NCPs (1 to 7).
    public enum Code: UInt8, Sendable {
        case configureRequest = 1, configureAck, configureNak, configureReject, terminateRequest,
             terminateAck, codeReject, protocolReject, echoRequest, echoReply, discardRequest
    }

    /// One LCP/NCP/PAP/CHAP packet.
    public struct Packet: Sendable, Equatable {
        public var code: UInt8
        public var id: UInt8
        public var data: [UInt8]
        public init(code: UInt8, id: UInt8, data: [UInt8] = []) { self.code = code; self.id = id; self.data = data }
        public init(_ code: Code, id: UInt8, data: [UInt8] = []) { self.code = code.rawValue; self.id = id; self.data = data }

        /// Bytes past the length field are padding and are ignored (RFC 1661 5); nil when the
        /// length is below 4 or past the bytes given.
        public init?(_ bytes: UnsafeRawBufferPointer) {
            guard bytes.count >= 4 else { return nil }
            let length = Int(bytes[2]) << 8 | Int(bytes[3])
            guard length >= 4, length <= bytes.count else { return nil }
            code = bytes[0]
            id = bytes[1]
            data = Array(bytes[4..<length])
        }

        /// nil when the packet would pass 65535 bytes.
        public var bytes: [UInt8]? {
            let length = 4 + data.count
            guard length <= 0xFFFF else { return nil }
            return [code, id, UInt8(length >> 8), UInt8(length & 0xFF)] + data
        }
    }

    /// One configuration option (type · length · data).
    public struct Option: Sendable, Equatable {
        public var type: UInt8
        public var data: [UInt8]
        public init(type: UInt8, data: [UInt8] = []) { self.type = type; self.data = data }

        public var u16: UInt16? { data.count == 2 ? UInt16(data[0]) << 8 | UInt16(data[1]) : nil }
        public var u32: UInt32? {
            data.count == 4 ? UInt32(data[0]) << 24 | UInt32(data[1]) << 16 | UInt32(data[2]) << 8 | UInt32(data[3]) : nil
        }
        public static func u16(_ type: UInt8, _ v: UInt16) -> Option { Option(type: type, data: [UInt8(v >> 8), UInt8(v & 0xFF)]) }
        public static func u32(_ type: UInt8, _ v: UInt32) -> Option {
            Option(type: type, data: [UInt8(v >> 24), UInt8((v >> 16) & 0xFF), UInt8((v >> 8) & 0xFF), UInt8(v & 0xFF)])
        }
    }

    /// The options of a Configure-Request/Ack/Nak/Reject; nil if one's length is below 2 or
    /// runs past the end.
    public static func parseOptions(_ data: [UInt8]) -> [Option]? {
        var out: [Option] = []
        var at = 0
        while at < data.count {
            guard at + 2 <= data.count else { return nil }
            let len = Int(data[at + 1])
            guard len >= 2, at + len <= data.count else { return nil }
            out.append(Option(type: data[at], data: Array(data[(at + 2)..<(at + len)])))
            at += len
        }
        return out
    }

    /// nil when an option's data passes 253 bytes.
    public static func encodeOptions(_ options: [Option]) -> [UInt8]? {
        var out: [UInt8] = []
        for o in options {
            guard o.data.count <= 253 else { return nil }
            out += [o.type, UInt8(o.data.count + 2)] + o.data
        }
        return out
    }

    // MARK: LCP and IPCP option types

    public enum LCPOption {
        public static let mru: UInt8 = 1
        public static let accm: UInt8 = 2
        public static let authProtocol: UInt8 = 3
        public static let magicNumber: UInt8 = 5
        public static let pfc: UInt8 = 7
        public static let acfc: UInt8 = 8
    }

    public enum IPCPOption {
        public static let address: UInt8 = 3
        public static let primaryDNS: UInt8 = 129
        public static let secondaryDNS: UInt8 = 131
    }

    public enum IPV6CPOption {
        public static let interfaceID: UInt8 = 1
    }

    /// CHAP's algorithm number for MS-CHAPv2 (RFC 2759 2).
    public static let chapMSCHAPv2: UInt8 = 0x81
}

/// PAP packets (RFC 1334 2.2).
public enum PAP {
    /// Authenticate-Request; nil if the user or password passes 255 bytes.
    public static func request(id: UInt8, user: [UInt8], password: [UInt8]) -> PPP.Packet? {
        guard user.count <= 255, password.count <= 255 else { return nil }
        return PPP.Packet(code: 1, id: id, data: [UInt8(user.count)] + user + [UInt8(password.count)] + password)
    }

    public enum Reply: Sendable, Equatable { case ack(message: String), nak(message: String) }

    /// Authenticate-Ack (2) or -Nak (3) with its message; nil for another code or a malformed one.
    public static func reply(_ p: PPP.Packet) -> Reply? {
        guard p.code == 2 || p.code == 3 else { return nil }
        var message = ""
        if let n = p.data.first, p.data.count >= 1 + Int(n) {
            message = printable(p.data[1..<(1 + Int(n))])
        }
        return p.code == 2 ? .ack(message: message) : .nak(message: message)
    }
}

/// CHAP packets as MS-CHAPv2 uses them (RFC 1994 4, RFC 2759 3-6).
public enum CHAP {
    public static let challenge: UInt8 = 1, response: UInt8 = 2, success: UInt8 = 3, failure: UInt8 = 4

    /// A Challenge's value and name; nil if malformed.
    public static func parseChallenge(_ p: PPP.Packet) -> (value: [UInt8], name: [UInt8])? {
        guard p.code == challenge, let n = p.data.first, p.data.count >= 1 + Int(n) else { return nil }
        return (Array(p.data[1..<(1 + Int(n))]), Array(p.data[(1 + Int(n))...]))
    }

    /// A Response with a value and the user's name.
    public static func response(id: UInt8, value: [UInt8], name: [UInt8]) -> PPP.Packet? {
        guard value.count <= 255, 5 + value.count + name.count <= 0xFFFF else { return nil }
        return PPP.Packet(code: response, id: id, data: [UInt8(value.count)] + value + name)
    }

    /// The message of a Success or Failure, printable.
    public static func message(_ p: PPP.Packet) -> String { printable(p.data[...]) }
}

/// Text from a peer for a log line: printable ASCII kept, anything else '?', at most 200 characters.
func printable(_ bytes: ArraySlice<UInt8>) -> String {
    String(decoding: bytes.prefix(200).map { $0 >= 32 && $0 < 127 ? $0 : 63 }, as: UTF8.self)
}
