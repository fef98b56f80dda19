import LoftCore
import LoftIO
import LoftTLS

/// Which end of a carrier this is: the holder's, which dials (client), or the front's, which
/// accepts (server). Every carrier has one, in its core.
public enum CarrierSide: Sendable { case client, server }

/// The states a carrier's core knows of its carrier: the carrier's own handshake steps come
/// before `open` (an enum's cases satisfy these).
protocol CarrierState: Equatable {
    static var open: Self { get }
    static var closing: Self { get }
    static var closed: Self { get }
}

/// How long a graceful close waits for the peer's end (ws Close, get's last chunk, h2's
/// END_STREAM) before the connection is cut.
let carrierCloseWaitMs: UInt64 = 2000

/// The skeleton every carrier has the same way, owned by the carrier (ws, get, h2, quic, h3):
/// its side, its state, the graceful close (the carrier keeps itself alive until closed, at
/// most `carrierCloseWaitMs` after it began), output flushed and input processed once after the
/// loop's batch however often asked for (`flushSoon`, `processSoon`), `carrierWritable` once
/// half the output is free again after a short write, and the read pause. The carrier keeps
/// what its wire needs (connections, framing, engine) and calls these directly: a final class
/// specialized for the carrier's State, no existential on the per-chunk path.
final class CarrierCore<State: CarrierState> {
    let side: CarrierSide
    let runtime: CarrierRuntime
    var state: State {
        didSet { if state == .closed && releaseWhenClosed { holder = nil } }
    }
    /// Deliveries paused by the embedder (`setReading(false)`).
    var readingPaused = false
    /// A write took less than it was offered: `carrierWritable` is owed.
    private(set) var wantWritable = false
    /// The carrier itself while a graceful close runs: its owner has let go, and the peer's end
    /// (or the close wait) must still find it.
    private var holder: AnyObject?
    private let releaseWhenClosed: Bool
    private(set) var flushSoon: SoonOnce!
    private(set) var processSoon: SoonOnce!

    /// `releaseWhenClosed`: the hold of a graceful close ends when the state becomes closed
    /// (quic: when the connection is over, `release()`).
    init(_ side: CarrierSide, runtime: CarrierRuntime, state: State, releaseWhenClosed: Bool = true) {
        self.side = side
        self.runtime = runtime
        self.state = state
        self.releaseWhenClosed = releaseWhenClosed
    }

    /// The carrier's own flush and input processing (each usually holds the carrier weakly),
    /// run once after the batch by `flushSoon` and `processSoon`. Called once, in the carrier's
    /// initializer.
    func bind(flush: @escaping () -> Void, process: @escaping () -> Void) {
        flushSoon = SoonOnce(loop: runtime.loop, flush)
        processSoon = SoonOnce(loop: runtime.loop, process)
    }

    var isServer: Bool { side == .server }
    var isOpen: Bool { state == .open }
    /// Closing or closed: the carrier's end has begun.
    var isEnding: Bool { state == .closing || state == .closed }

    // MARK: writing

    /// A write took `n` of `count` bytes: the output goes out after the batch, and a short
    /// write owes the embedder `carrierWritable`.
    @inline(__always)
    func wrote(_ n: Int, of count: Int) {
        if n < count { wantWritable = true }
        if n > 0 { flushSoon.schedule() }
    }

    /// After a flush: true (once) when `carrierWritable` is owed, the carrier is open, at
    /// least half of `capacity` is `free` and the carrier's own condition holds (h2: its send
    /// window is open). Nothing is computed unless it is owed.
    @inline(__always)
    func writableAgain(_ free: @autoclosure () -> Int, of capacity: @autoclosure () -> Int,
                       and ready: @autoclosure () -> Bool = true) -> Bool {
        guard wantWritable, state == .open, free() >= capacity() / 2, ready() else { return false }
        wantWritable = false
        return true
    }

    // MARK: reading

    /// Pauses (false) or resumes (true) deliveries: `leg`, the connection read from, stops or
    /// resumes reading; on resume what waits is processed after the batch.
    func setReading(_ on: Bool, _ leg: TLSConnection?) {
        readingPaused = !on
        leg?.setReading(on)
        if on { processSoon.schedule() }
    }

    // MARK: dialling and closing

    /// Client: `expire` runs after `ms` if the carrier is still in its handshake then.
    func dialDeadline(_ ms: UInt64, handshaking: @escaping (State) -> Bool, _ expire: @escaping () -> Void) {
        runtime.after(ms) { [weak self] in
            guard let self, handshaking(self.state) else { return }
            expire()
        }
    }

    /// The carrier keeps itself alive until closed (or `release()`).
    func hold(_ carrier: AnyObject) { holder = carrier }

    func release() { holder = nil }

    /// A graceful close begins: closing, the carrier held, deliveries resumed (the peer's end
    /// must be read). After the close wait a carrier still closing is closed and `expire` cuts
    /// its connections; `otherwise` runs when it was closed already (or is gone).
    func beginClosing(_ carrier: AnyObject, expire: @escaping () -> Void, otherwise: @escaping () -> Void = {}) {
        state = .closing
        holder = carrier
        readingPaused = false
        runtime.after(carrierCloseWaitMs) { [weak self] in
            guard let self, self.state == .closing else { otherwise(); return }
            // The carrier lives through `expire` (closed lets go of it).
            let keep = self.holder
            self.state = .closed
            expire()
            withExtendedLifetime(keep) {}
        }
    }

    /// A failure: closed at once, its connections cut (`cut`); true when the embedder is to
    /// hear why (the carrier was neither closed nor closing: after `close()` it hears nothing).
    func fail(cutting cut: () -> Void) -> Bool {
        guard let old = end() else { return false }
        cut()
        return old != .closing
    }

    /// Moves to closed: the state before, or nil when it was closed already.
    @discardableResult
    func end() -> State? {
        guard state != .closed else { return nil }
        let old = state
        state = .closed
        return old
    }
}

/// A carrier on a `CarrierCore`: its side, state and openness are the core's.
protocol CoreCarrier: Carrier {
    associatedtype State: CarrierState
    var core: CarrierCore<State> { get }
}

extension CoreCarrier {
    var side: CarrierSide { core.side }
    var isOpen: Bool { core.isOpen }
    var state: State {
        get { core.state }
        set { core.state = newValue }
    }
}

/// The first steps of a carrier that dials (ws, get, h2 clients): resolving the front's name,
/// then connecting to it.
protocol DialState: CarrierState {
    static var resolving: Self { get }
    static var connecting: Self { get }
}

extension CarrierCore where State: DialState {
    /// Client: the front's name resolved, then `connect` with its addresses (state connecting);
    /// `fail` hears a failed resolve, or a timeout ("no `what` within N ms") when the carrier
    /// is still `handshaking` after the client's connect timeout.
    func dial(_ client: CarrierClient, _ what: String, handshaking: @escaping (State) -> Bool,
              fail: @escaping (CarrierCloseReason) -> Void, connect: @escaping ([Endpoint]) -> Void) {
        let timeout = client.options.connectTimeoutMs
        dialDeadline(timeout, handshaking: handshaking) { fail(.timeout("no \(what) within \(timeout) ms")) }
        client.resolve(fail) { [weak self] endpoints in
            guard let self, self.state == .resolving else { return }
            self.state = .connecting
            connect(endpoints)
        }
    }
}
