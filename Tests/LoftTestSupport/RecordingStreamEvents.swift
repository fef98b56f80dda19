import LoftCore

/// A stream's driver for tests: counts what the stream told it.
public final class RecordingStreamEvents: ByteStreamEvents {
    public var connected = 0, readable = 0, writable = 0
    public var failures: [FlowFailure] = []
    public init() {}
    public func streamConnected(_: ByteStream) { connected += 1 }
    public func streamFailed(_: ByteStream, _ failure: FlowFailure) { failures.append(failure) }
    public func streamReadable(_: ByteStream) { readable += 1 }
    public func streamWritable(_: ByteStream) { writable += 1 }
}
