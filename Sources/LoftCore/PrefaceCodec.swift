/// What a preface end (`LoftIO.PrefaceStream`) waits for at the start of its inner stream
/// before it passes bytes through: the peer's answer to its preamble (a loft flow's OPEN_OK or
/// OPEN_FAIL, VLESS's response header) or the peer's own preamble (the front reads a flow's
/// OPEN). A small value type beside its wire format; sans-IO, so its fuzz target drives it
/// without a stream.
public protocol PrefaceCodec {
    associatedtype Answer
    /// The longest answer in bytes (the preface end's buffer).
    var capacity: Int { get }
    /// The answer's bytes so far (all of them, from its first): how many more to read, or the
    /// answer they are. A reader reads exactly the bytes `needMore` asks for, never more, so
    /// the stream's own bytes after the answer stay in the stream.
    func parse(_ bytes: UnsafeRawBufferPointer) -> PrefaceParse<Answer>
}

public enum PrefaceParse<Answer> {
    /// Read exactly this many more bytes (at least 1, and no more than the capacity allows),
    /// then ask again.
    case needMore(Int)
    case answer(Answer)
}

/// Nothing to wait for on the stream: the end passes through as soon as it has its inner
/// stream (sstp's pending link streams wait for the lookup that makes it).
public struct NoAnswer: PrefaceCodec {
    public init() {}
    public var capacity: Int { 0 }
    public func parse(_ bytes: UnsafeRawBufferPointer) -> PrefaceParse<Void> { .answer(()) }
}
