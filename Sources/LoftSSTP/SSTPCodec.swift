// SSTP packets (MS-SSTP 2.2), sans-IO. Every packet starts with a 4-byte header:
//   version 0x10 · reserved (7 bits) + C (1: control, 0: data) · 4 reserved bits + 12-bit length
// (the whole packet, header included). A data packet carries one PPP frame; a control packet is
//   message type (2) · attribute count (2) · attributes, each
//   reserved (1) · attribute id (1) · 4 reserved bits + 12-bit length (header included) · value.

/// The SSTP wire format: parse and encode, no state.
public enum SSTP {
    public static let version: UInt8 = 0x10
    /// The largest packet the 12-bit length can say.
    public static let maxPacket = 4095
    public static let headerLength = 4

    /// Control message types (MS-SSTP 2.2.9).
    public enum MessageType: UInt16, Sendable {
        case callConnectRequest = 1, callConnectAck, callConnectNak, callConnected, callAbort,
             callDisconnect, callDisconnectAck, echoRequest, echoResponse
    }

    /// Attribute ids (MS-SSTP 2.2.2).
    public enum AttributeID: UInt8, Sendable {
        case noError = 0, encapsulatedProtocolID, statusInfo, cryptoBinding, cryptoBindingRequest
    }

    /// Hash protocols of the crypto binding (a bitmask in the request, one bit in the binding).
    public static let hashSHA1: UInt8 = 0x01
    public static let hashSHA256: UInt8 = 0x02
    /// SSTP_ENCAPSULATED_PROTOCOL_PPP.
    public static let protocolPPP: UInt16 = 0x0001

    /// Status values of the Status Info attribute (MS-SSTP 2.2.5).
    public static func statusName(_ status: UInt32) -> String {
        let names = ["no-error", "duplicate-attribute", "unrecognized-attribute", "invalid-attribute-value-length",
                     "value-not-supported", "unaccepted-frame-received", "retry-count-exceeded",
                     "invalid-frame-received", "negotiation-timeout", "attribute-not-supported-in-message",
                     "required-attribute-missing", "status-info-not-supported-in-message"]
        return Int(status) < names.count ? names[Int(status)] : "status-\(status)"
    }

    public struct Attribute: Sendable, Equatable {
        public var id: UInt8
        public var value: [UInt8]
        public init(id: UInt8, value: [UInt8]) { self.id = id; self.value = value }
        public init(_ id: AttributeID, _ value: [UInt8]) { self.id = id.rawValue; self.value = value }
    }

    public struct ControlMessage: Sendable, Equatable {
        public var type: UInt16
        public var attributes: [Attribute]
        public init(type: UInt16, attributes: [Attribute] = []) { self.type = type; self.attributes = attributes }
        public init(_ type: MessageType, _ attributes: [Attribute] = []) { self.type = type.rawValue; self.attributes = attributes }
        public var messageType: MessageType? { MessageType(rawValue: type) }
        public func attribute(_ id: AttributeID) -> Attribute? { attributes.first { $0.id == id.rawValue } }
    }

    public enum Parsed: Sendable, Equatable {
        /// Fewer bytes than the next packet needs.
        case needMore
        /// A data packet: its PPP frame is `payload` (offsets into the input); `length` bytes used.
        case data(payload: Range<Int>, length: Int)
        case control(ControlMessage, length: Int)
        /// Not SSTP (another version, a length below the header, a malformed control message).
        case bad(String)
    }

    /// The next packet at the start of `bytes`.
    public static func parse(_ bytes: UnsafeRawBufferPointer) -> Parsed {
        guard bytes.count >= headerLength else {
            if bytes.count >= 1 && bytes[0] != version { return .bad("version 0x\(hex(bytes[0])), not 0x10") }
            return .needMore
        }
        guard bytes[0] == version else { return .bad("version 0x\(hex(bytes[0])), not 0x10") }
        let length = (Int(bytes[2] & 0x0F) << 8) | Int(bytes[3])
        let control = bytes[1] & 0x01 == 1
        guard length >= headerLength + (control ? 4 : 0) else {
            return .bad("packet length \(length) is below its header")
        }
        guard bytes.count >= length else { return .needMore }
        if !control { return .data(payload: headerLength..<length, length: length) }
        let type = UInt16(bytes[4]) << 8 | UInt16(bytes[5])
        let count = Int(bytes[6]) << 8 | Int(bytes[7])
        var attributes: [Attribute] = []
        var at = 8
        for i in 0..<count {
            guard at + 4 <= length else {
                return .bad("control message \(type) says \(count) attributes, attribute \(i) is past its end")
            }
            let alen = (Int(bytes[at + 2] & 0x0F) << 8) | Int(bytes[at + 3])
            guard alen >= 4, at + alen <= length else {
                return .bad("control message \(type): attribute \(i) has length \(alen), \(length - at) bytes left")
            }
            attributes.append(Attribute(id: bytes[at + 1], value: Array(bytes[(at + 4)..<(at + alen)])))
            at += alen
        }
        guard at == length else { return .bad("control message \(type) has \(length - at) bytes after its attributes") }
        return .control(ControlMessage(type: type, attributes: attributes), length: length)
    }

    /// The whole packet of a control message; nil if it would pass 4095 bytes or 65535 attributes.
    public static func encode(_ message: ControlMessage) -> [UInt8]? {
        var length = 8
        for a in message.attributes {
            guard a.value.count <= maxPacket - 4 else { return nil }
            length += 4 + a.value.count
        }
        guard length <= maxPacket, message.attributes.count <= 0xFFFF else { return nil }
        var out: [UInt8] = []
        out.reserveCapacity(length)
        out += [version, 0x01, UInt8(length >> 8), UInt8(length & 0xFF)]
        out += [UInt8(message.type >> 8), UInt8(message.type & 0xFF),
                UInt8(message.attributes.count >> 8), UInt8(message.attributes.count & 0xFF)]
        for a in message.attributes {
            let alen = 4 + a.value.count
            out += [0, a.id, UInt8(alen >> 8), UInt8(alen & 0xFF)]
            out += a.value
        }
        return out
    }

    /// The 4-byte header of a data packet whose payload is `payloadLength` bytes (at most 4091).
    public static func dataHeader(payloadLength: Int) -> (UInt8, UInt8, UInt8, UInt8) {
        precondition(payloadLength >= 0 && payloadLength <= maxPacket - headerLength)
        let length = payloadLength + headerLength
        return (version, 0x00, UInt8(length >> 8), UInt8(length & 0xFF))
    }

    // MARK: typed attributes

    /// Encapsulated Protocol ID: PPP.
    public static func encapsulatedPPP() -> Attribute { Attribute(.encapsulatedProtocolID, [0x00, 0x01]) }

    /// The server's Crypto Binding Request (MS-SSTP 2.2.6): hash bitmask and nonce.
    public struct BindingRequest: Sendable, Equatable {
        public var hashBitmask: UInt8
        public var nonce: [UInt8]
        public init(hashBitmask: UInt8, nonce: [UInt8]) { self.hashBitmask = hashBitmask; self.nonce = nonce }
        public init?(_ a: Attribute) {
            guard a.id == AttributeID.cryptoBindingRequest.rawValue, a.value.count == 36 else { return nil }
            hashBitmask = a.value[3]
            nonce = Array(a.value[4..<36])
        }
        public var attribute: Attribute { Attribute(.cryptoBindingRequest, [0, 0, 0, hashBitmask] + nonce) }
    }

    /// The client's Crypto Binding (MS-SSTP 2.2.7): hash protocol, nonce, certificate hash and
    /// compound MAC, 32 bytes each (a SHA-1 value is padded with zeros).
    public struct Binding: Sendable, Equatable {
        public var hashProtocol: UInt8
        public var nonce: [UInt8]
        public var certHash: [UInt8]
        public var compoundMAC: [UInt8]
        public init(hashProtocol: UInt8, nonce: [UInt8], certHash: [UInt8], compoundMAC: [UInt8]) {
            self.hashProtocol = hashProtocol
            self.nonce = Binding.pad(nonce)
            self.certHash = Binding.pad(certHash)
            self.compoundMAC = Binding.pad(compoundMAC)
        }
        public init?(_ a: Attribute) {
            guard a.id == AttributeID.cryptoBinding.rawValue, a.value.count == 100 else { return nil }
            hashProtocol = a.value[3]
            nonce = Array(a.value[4..<36])
            certHash = Array(a.value[36..<68])
            compoundMAC = Array(a.value[68..<100])
        }
        public var attribute: Attribute { Attribute(.cryptoBinding, [0, 0, 0, hashProtocol] + nonce + certHash + compoundMAC) }
        static func pad(_ b: [UInt8]) -> [UInt8] { Array((b + [UInt8](repeating: 0, count: 32)).prefix(32)) }
    }

    /// Status Info (MS-SSTP 2.2.5): the attribute it is about, the status and that attribute's value.
    public struct StatusInfo: Sendable, Equatable {
        public var attributeID: UInt8
        public var status: UInt32
        public var value: [UInt8]
        public init(attributeID: UInt8, status: UInt32, value: [UInt8] = []) {
            self.attributeID = attributeID; self.status = status; self.value = value
        }
        public init?(_ a: Attribute) {
            guard a.id == AttributeID.statusInfo.rawValue, a.value.count >= 8 else { return nil }
            attributeID = a.value[3]
            status = UInt32(a.value[4]) << 24 | UInt32(a.value[5]) << 16 | UInt32(a.value[6]) << 8 | UInt32(a.value[7])
            value = Array(a.value[8...])
        }
        public var attribute: Attribute {
            Attribute(.statusInfo, [0, 0, 0, attributeID, UInt8(status >> 24), UInt8((status >> 16) & 0xFF),
                                    UInt8((status >> 8) & 0xFF), UInt8(status & 0xFF)] + value)
        }
        public var description: String { "\(SSTP.statusName(status)) (attribute \(attributeID))" }
    }

    static func hex(_ b: UInt8) -> String {
        let d = Array("0123456789abcdef")
        return String([d[Int(b >> 4)], d[Int(b & 15)]])
    }
}

extension SSTP {
    /// The HTTP request that opens an SSTP connection (MS-SSTP 2.2.1 / 3.2.4.1): the method
    /// SSTP_DUPLEX_POST on the fixed URI, an unbounded content length and a correlation id.
    public static func httpRequest(host: String, correlationID: String) -> [UInt8] {
        Array(("SSTP_DUPLEX_POST /sra_{BA195980-CD49-458b-9E23-C84EE0ADCD75}/ HTTP/1.1\r\n" +
               "Host: \(host)\r\n" +
               "SSTPCORRELATIONID: {\(correlationID)}\r\n" +
               "Content-Length: 18446744073709551615\r\n\r\n").utf8)
    }

    public enum HTTPResponse: Sendable, Equatable {
        case needMore
        /// 200: the SSTP packets start `length` bytes in.
        case ok(length: Int)
        /// Another status (or not HTTP): the status line, printable, at most 200 characters.
        case refused(String)
    }

    /// The server's answer to the request: headers up to the blank line (at most 8 KiB).
    public static func parseHTTPResponse(_ bytes: UnsafeRawBufferPointer) -> HTTPResponse {
        let limit = min(bytes.count, 8192)
        var end: Int?
        if limit >= 4 {
            for i in 0...(limit - 4) where bytes[i] == 13 && bytes[i + 1] == 10 && bytes[i + 2] == 13 && bytes[i + 3] == 10 {
                end = i + 4
                break
            }
        }
        let lineEnd = (0..<limit).first { bytes[$0] == 13 || bytes[$0] == 10 } ?? limit
        let line = String(decoding: bytes[0..<min(lineEnd, 200)].map { $0 >= 32 && $0 < 127 ? $0 : 63 }, as: UTF8.self)
        if limit >= 5, !bytes[0..<5].elementsEqual("HTTP/".utf8) { return .refused(line) }
        guard let end else { return bytes.count >= 8192 ? .refused("response headers longer than 8 KiB") : .needMore }
        let parts = line.split(separator: " ", maxSplits: 2)
        guard parts.count >= 2, parts[0].hasPrefix("HTTP/1."), parts[1] == "200" else { return .refused(line) }
        return .ok(length: end)
    }
}
