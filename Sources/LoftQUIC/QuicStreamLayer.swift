import Glibc

/// What the quic carrier and its flows need of a connection's streams: QuicConnection itself
/// (quic: raw QUIC streams) or `H3Streams` (h3: request-stream bodies over nghttp3).
/// Public, not `package`: the h3 fuzz target (compiled outside the package) puts an in-memory
/// stream set under H3Streams, and a conformance outside the package to a `package` protocol
/// with `package` default implementations crashes Swift 6.3.1's type checker.
public protocol QuicStreamLayer: AnyObject {
    func openStream(ringCap: Int?) -> Int64?
    func writeRoom(_ id: Int64) -> Int
    func write(_ id: Int64, _ bytes: UnsafeRawBufferPointer) -> Int
    func read(_ id: Int64, into: UnsafeMutableRawBufferPointer) -> (Int, Bool)
    func drain(_ id: Int64, _ body: (UnsafeRawBufferPointer) -> Void) -> Bool
    /// Hands up to `max` received bytes of the stream to `body` (which takes them all), in
    /// place and in one or more pieces (h3: one per run of body bytes); true once the FIN was
    /// reached.
    func drain(_ id: Int64, upTo max: Int, _ body: (UnsafeRawBufferPointer) -> Void) -> Bool
    func finish(_ id: Int64)
    func release(_ id: Int64)
    func reset(_ id: Int64, code: UInt64)
    /// Bytes written and not yet handed to the wire's packets.
    func unsent(_ id: Int64) -> Int
}

extension QuicStreamLayer {
    /// Takes up to `into.count` received bytes; true once the peer's FIN was read.
    public func read(_ id: Int64, into: UnsafeMutableRawBufferPointer) -> (Int, Bool) {
        var n = 0
        let eof = drain(id, upTo: into.count) { b in
            (into.baseAddress! + n).copyMemory(from: b.baseAddress!, byteCount: b.count)
            n += b.count
        }
        return (n, eof)
    }

    /// Hands every received byte of the stream to `body` (which takes them all).
    public func drain(_ id: Int64, _ body: (UnsafeRawBufferPointer) -> Void) -> Bool { drain(id, upTo: .max, body) }
}

/// The stream layer a `QuicFlow` goes through (raw QUIC streams, or HTTP/3 request bodies),
/// which also shows received bytes in place.
package protocol QuicFlowLayer: QuicStreamLayer {
    /// The received bytes in place, in up to `max` pieces in `iov` (valid until `consume`, an
    /// append or a release): how many bytes, and whether the FIN has been reached (none left and
    /// the FIN received).
    func peek(_ id: Int64, _ iov: UnsafeMutablePointer<iovec>, max: Int, count: inout Int) -> (Int, Bool)
    /// `n` bytes of what `peek` showed were taken.
    func consume(_ id: Int64, _ n: Int)
    /// Up to `max` bytes of the stream's free send buffer in one piece, written in place and
    /// then committed (nil: not supported; h3's bodies go through nghttp3's own buffer).
    func writeSpace(_ id: Int64, max: Int) -> UnsafeMutableRawBufferPointer?
    func commitWrite(_ id: Int64, _ n: Int)
}

extension QuicConnection: QuicFlowLayer {}

extension QuicConnection: QuicStreamLayer {
    package func unsent(_ id: Int64) -> Int { stream(id)?.unsent ?? 0 }
}
