import LoftCore

/// What both ends of a loft session share: the carrier byte path, keepalive, and the data
/// path of streams and associations. `ClientSession` and `FrontSession` add their own
/// handshake and the calls only one end makes.
public class SessionEnd {
    let engine: SessionEngine

    init(role: SessionRole, limits: SessionLimits) {
        engine = SessionEngine(role: role, limits: limits)
    }

    // MARK: carrier bytes

    /// Feeds carrier bytes. On a throw the session has queued GOAWAY: flush it, close the
    /// carrier (the client also detach()es). Input while detached or after GOAWAY is ignored.
    public func receive(_ bytes: UnsafeRawBufferPointer) throws(ProtocolError) {
        try engine.receive(bytes, now: nil)
    }

    /// As receive(_:), with the monotonic time in ms: liveness and RTT are then exact instead
    /// of rounded to the next tick.
    public func receive(_ bytes: UnsafeRawBufferPointer, now: UInt64) throws(ProtocolError) {
        try engine.receive(bytes, now: now)
    }

    /// A DGRAM frame (header included) that came outside the byte channel: a QUIC DATAGRAM.
    /// Errors as for `receive`.
    public func receiveDatagram(_ bytes: UnsafeRawBufferPointer, now: UInt64? = nil) throws(ProtocolError) {
        try engine.receiveDatagram(bytes, now: now)
    }

    /// Where DGRAM frames go when the carrier has datagrams of its own (quic): the sink gets one
    /// whole frame and returns false when it cannot take it (then it goes in the output). Nil:
    /// every DGRAM goes in the output.
    public var datagramSink: ((UnsafeRawBufferPointer) -> Bool)? {
        get { engine.datagramSink }
        set { engine.datagramSink = newValue }
    }

    /// Clean EOF from the carrier: incompleteFrame if it ended inside a frame.
    public func carrierEnded() throws(ProtocolError) {
        try engine.carrierEnded()
    }

    // MARK: output

    /// Bytes waiting to be handed to the carrier (with replay, not those kept for it).
    public var outputCount: Int { engine.unsentCount }

    /// `body` gets the queued bytes and returns how many it took; they are consumed. It must
    /// not call back into the session.
    public func withOutput(_ body: (UnsafeRawBufferPointer) -> Int) {
        engine.withOutput(body)
    }

    // MARK: keepalive

    /// Sends PING when one keepalive interval passed since the last; false when nothing was
    /// heard for 2 intervals (a dead carrier). The client has no interval before STATUS: true.
    public func tick(now: UInt64) -> Bool { engine.tick(now: now) }

    /// When `tick` is next due (a deadline for the loop's timer heap), or nil: nothing is,
    /// until the session changes (STATUS, a stream opened).
    public func nextTick(now: UInt64) -> UInt64? { engine.nextTick(now: now) }

    /// Last PING→PONG round trip, in ms.
    public var rttMs: UInt64? { engine.rttMs }

    // MARK: streams

    /// Queues up to min(send credit, output room) bytes; 0 = wait for streamWritable. The
    /// client may write before OPEN_OK (the front holds it until it connects); the front only
    /// after accept().
    public final func write(stream: UInt32, _ bytes: UnsafeRawBufferPointer) -> Int { engine.write(stream, bytes) }
    public final func writableBytes(stream: UInt32) -> Int { engine.writableBytes(stream) }
    /// Consumes; CREDIT goes out once half the window was read. Unknown ids read as eof.
    public final func read(stream: UInt32, into buffer: UnsafeMutableRawBufferPointer) -> StreamRead { engine.read(stream, into: buffer) }
    public final func readableBytes(stream: UInt32) -> Int { engine.readableBytes(stream) }
    /// FIN (half-close).
    public final func finish(stream: UInt32) { engine.finish(stream) }
    /// RST; the id is freed at once.
    public final func reset(stream: UInt32, reason: RstReason) { engine.resetStream(stream, reason) }
    /// Frees a stream finished both ways (unread bytes are dropped); any other stream is reset.
    public final func close(stream: UInt32) { engine.close(stream) }

    /// RST cancel.
    public func closeAssociation(_ id: UInt32) { engine.closeAssociation(id) }

    /// Streams and associations counting toward maxStreams.
    public var openStreamCount: Int { engine.liveCount }
    public var counters: SessionCounters { engine.counters }
    /// Unread received bytes over all streams.
    public var bufferedBytes: Int { engine.bufferedTotal }
    /// Streams still held, including finished ones with unread bytes (tests).
    var engineStreamCount: Int { engine.streams.count }

    // MARK: replay (docs/protocol.md §8.1)

    /// Replay was negotiated: a lost carrier parks the streams instead of dropping them.
    public var replayActive: Bool { engine.replay }
    /// The carrier is gone and the streams wait for a RESUME.
    public var isParked: Bool { engine.parked }
    /// Session bytes kept: sent and not yet acknowledged, plus queued and not yet sent (with replay).
    public var replayHeldBytes: Int { engine.retaining ? engine.keptBytes + engine.output.count : 0 }
    /// Streams and associations held (parked ones included).
    public var heldStreamCount: Int { engine.streams.count }
}
