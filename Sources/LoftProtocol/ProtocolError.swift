/// Why bytes from a peer are not valid loft, or why a frame cannot be encoded. Every case ends
/// the session: the side that finds it sends GOAWAY (protocol error, or unsupported version)
/// and closes the carrier. docs/protocol.md lists when each one applies.
public enum ProtocolError: Error, Equatable, Sendable, CustomStringConvertible {
    // Codec: the bytes are not a well-formed frame.
    /// The type byte is not a version 1 frame type.
    case unknownType(UInt8)
    /// A flag bit is set; version 1 defines none.
    case reservedFlags(FrameType, UInt8)
    /// A session frame on a stream other than 0, or a stream frame on stream 0.
    case badStreamID(FrameType, UInt32)
    /// The length field is impossible for the type (fixed size differs, below the minimum), or
    /// the body has bytes left over after its last field.
    case badLength(FrameType, Int)
    /// A field runs past the end of the body (a length prefix larger than what is left).
    case truncatedBody(FrameType)
    /// An address type (SOCKS5 ATYP) other than 1, 3 or 4 (or 3 where only an IP may stand).
    case badAddressType(UInt8)
    /// A domain name that is empty or has a byte outside 0x21…0x7E.
    case badDomainName
    /// A string longer than its field allows.
    case stringTooLong(field: String, length: Int, max: Int)
    /// A text field that is not valid UTF-8.
    case invalidUTF8(field: String)
    /// A field whose value is out of range for its frame (the field is named).
    case invalidValue(FrameType, field: String)
    /// HELLO or RESUME with a version this side does not speak.
    case unsupportedVersion(UInt8)
    /// The carrier ended in the middle of a frame (`FrameDecoder.finish`).
    case incompleteFrame(buffered: Int)

    // Session: a well-formed frame where the state machine does not allow it.
    /// A frame this side never receives, or not in the session's current state (a second
    /// HELLO, STATUS to the front, OPEN from the front, DATA before OPEN_OK, ...).
    case unexpectedFrame(FrameType)
    /// A frame on a stream id that was never opened on this attachment.
    case unopenedStream(FrameType, UInt32)
    /// OPEN with an id that is even, or not above every id opened before on the attachment.
    case badNewStreamID(UInt32)
    /// OPEN while the front's max_streams streams are already open.
    case streamLimit(UInt32)
    /// A TCP frame on a UDP association or DGRAM on a TCP stream.
    case wrongNetwork(FrameType, UInt32)
    /// DATA or FIN after the peer's FIN on that stream.
    case afterFin(FrameType, UInt32)
    /// DATA beyond the credit this side granted on that stream.
    case creditExceeded(UInt32)
    /// CREDIT that would raise the stream's send credit above 2^32 - 1.
    case creditOverflow(UInt32)
    /// More received bytes waiting to be read across the session than its limit.
    case bufferLimit(Int)
    /// STATUS with an instance id other than the session's.
    case instanceMismatch
    /// The peer keeps sending requests (PING) without reading the answers: this side's
    /// output grew past its limit.
    case outputOverflow(Int)
    /// Replay (docs/protocol.md §8.1): an ACK, RESUME or STATUS says the peer received
    /// `claimed` of this side's session bytes, outside what it can have: below what it
    /// acknowledged before (`acked`) or above what was sent (`sent`).
    case replayOffset(claimed: UInt64, acked: UInt64, sent: UInt64)

    public var description: String {
        switch self {
        case .unknownType(let t): return "unknown frame type 0x\(hex(t))"
        case .reservedFlags(let t, let f): return "\(t) with reserved flags 0x\(hex(f))"
        case .badStreamID(let t, let s): return "\(t) on stream \(s)"
        case .badLength(let t, let l): return "\(t) with bad length \(l)"
        case .truncatedBody(let t): return "\(t) body truncated"
        case .badAddressType(let a): return "bad address type \(a)"
        case .badDomainName: return "bad domain name"
        case .stringTooLong(let f, let l, let m): return "\(f) too long (\(l) > \(m) bytes)"
        case .invalidUTF8(let f): return "\(f) is not UTF-8"
        case .invalidValue(let t, let f): return "\(t) with invalid \(f)"
        case .unsupportedVersion(let v): return "unsupported version \(v)"
        case .incompleteFrame(let n): return "carrier ended inside a frame (\(n) bytes)"
        case .unexpectedFrame(let t): return "unexpected \(t)"
        case .unopenedStream(let t, let s): return "\(t) on unopened stream \(s)"
        case .badNewStreamID(let s): return "OPEN with bad stream id \(s)"
        case .streamLimit(let m): return "more than \(m) streams"
        case .wrongNetwork(let t, let s): return "\(t) on stream \(s) of the other network"
        case .afterFin(let t, let s): return "\(t) after FIN on stream \(s)"
        case .creditExceeded(let s): return "DATA beyond credit on stream \(s)"
        case .creditOverflow(let s): return "CREDIT overflow on stream \(s)"
        case .bufferLimit(let n): return "more than \(n) bytes buffered"
        case .instanceMismatch: return "STATUS for another instance"
        case .outputOverflow(let n): return "peer not reading (\(n) bytes queued)"
        case .replayOffset(let c, let a, let s): return "peer claims \(c) session bytes received, outside \(a)...\(s)"
        }
    }
}

private func hex(_ b: UInt8) -> String {
    let d = Array("0123456789abcdef".utf8)
    return String(decoding: [d[Int(b >> 4)], d[Int(b & 15)]], as: UTF8.self)
}
