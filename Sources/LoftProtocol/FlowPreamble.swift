import LoftCore

/// quic: the one frame at the start of each direction of a TCP flow's own QUIC stream
/// (docs/protocol.md §1.2): the client's OPEN (stream field 1, network 6 for a flow), the
/// front's OPEN_OK or OPEN_FAIL (stream field 1). Everything after it is the flow's raw bytes,
/// so a reader takes exactly the bytes `needMore` asks for, never more.
public enum FlowPreamble {
    /// The stream field of these frames.
    public static let streamField: UInt32 = 1
    /// The longest OPEN: header, network, and a domain of 255 bytes with its port.
    public static let maxOpen = LoftWire.headerSize + 1 + 1 + 1 + 255 + 2

    public enum Open: Equatable {
        /// Read exactly this many more bytes, then ask again.
        case needMore(Int)
        case open(network: FlowNetwork, destination: Destination)
        case malformed(ProtocolError)
    }

    public enum Answer: Equatable {
        case needMore(Int)
        case accepted
        case refused(OpenFailReason)
        case malformed(ProtocolError)
    }

    /// The client's OPEN from the first bytes of the stream (what was read so far).
    public static func parseOpen(_ bytes: UnsafeRawBufferPointer) -> Open {
        let hs = LoftWire.headerSize
        if bytes.count < hs { return .needMore(hs - bytes.count) }
        do throws(ProtocolError) {
            let h = try WireFormat.parseHeader(UnsafeRawBufferPointer(rebasing: bytes[0..<hs]))
            guard h.type == .open else { throw .unexpectedFrame(h.type) }
            guard h.stream == streamField else { throw .badStreamID(.open, h.stream) }
            let total = hs + h.length
            guard total <= maxOpen else { throw .badLength(.open, h.length) }
            if bytes.count < total { return .needMore(total - bytes.count) }
            guard bytes.count == total else { throw .badLength(.open, bytes.count - hs) }
            guard case .open(_, let network, let destination) = try WireFormat.parseBody(h, UnsafeRawBufferPointer(rebasing: bytes[hs..<total])) else {
                throw .unexpectedFrame(h.type)
            }
            return .open(network: network, destination: destination)
        } catch {
            return .malformed(error)
        }
    }

    /// The front's answer from the first bytes of the stream it sent back.
    public static func parseAnswer(_ bytes: UnsafeRawBufferPointer) -> Answer {
        let hs = LoftWire.headerSize
        if bytes.count < hs { return .needMore(hs - bytes.count) }
        do throws(ProtocolError) {
            let h = try WireFormat.parseHeader(UnsafeRawBufferPointer(rebasing: bytes[0..<hs]))
            guard h.type == .openOK || h.type == .openFail else { throw .unexpectedFrame(h.type) }
            guard h.stream == streamField else { throw .badStreamID(h.type, h.stream) }
            let total = hs + h.length
            if bytes.count < total { return .needMore(total - bytes.count) }
            guard bytes.count == total else { throw .badLength(h.type, bytes.count - hs) }
            switch try WireFormat.parseBody(h, UnsafeRawBufferPointer(rebasing: bytes[hs..<total])) {
            case .openOK: return .accepted
            case .openFail(_, let reason): return .refused(reason)
            default: throw .unexpectedFrame(h.type)
            }
        } catch {
            return .malformed(error)
        }
    }

    /// The client's OPEN for a TCP flow; nil when the destination cannot be encoded.
    public static func open(_ destination: Destination) -> [UInt8]? {
        var q = ByteQueue()
        guard (try? FrameEncoder.encode(.open(stream: streamField, network: .tcp, destination: destination), into: &q)) != nil else {
            return nil
        }
        return q.withUnsafeReadableBytes { [UInt8]($0) }
    }

    public static let openOK: [UInt8] = [0x11, 0, 0, 0, 0, 1, 0, 0]

    public static func openFail(_ reason: OpenFailReason) -> [UInt8] {
        [0x12, 0, 0, 0, 0, 1, 0, 1, reason.rawValue == 0 ? 1 : reason.rawValue]
    }
}

extension FlowPreamble {
    /// The client's OPEN as the front's preface end reads it (`LoftIO.PrefaceStream`).
    public struct OpenCodec: PrefaceCodec {
        public init() {}
        public var capacity: Int { FlowPreamble.maxOpen }
        public func parse(_ bytes: UnsafeRawBufferPointer) -> PrefaceParse<Open> {
            let r = FlowPreamble.parseOpen(bytes)
            if case .needMore(let n) = r { return .needMore(n) }
            return .answer(r)
        }
    }

    /// The front's OPEN_OK or OPEN_FAIL as the holder's preface end reads it.
    public struct AnswerCodec: PrefaceCodec {
        public init() {}
        public var capacity: Int { 16 }
        public func parse(_ bytes: UnsafeRawBufferPointer) -> PrefaceParse<Answer> {
            let r = FlowPreamble.parseAnswer(bytes)
            if case .needMore(let n) = r { return .needMore(n) }
            return .answer(r)
        }
    }
}
