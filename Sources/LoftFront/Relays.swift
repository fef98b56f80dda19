import Glibc
import LoftCore
import LoftProtocol

/// One TCP stream of a session joined to a socket to its destination. Bytes move only when
/// the other side has room: the socket is read while the session grants send credit, and the
/// session is read while the socket takes bytes. At most one read's worth (64 KiB) waits here.
final class StreamRelay: ByteStreamEvents {
    private unowned let connection: FrontConnection
    let stream: UInt32
    let destination: Destination
    private var socket: ByteStream?
    private var connected = false
    private var finished = false
    /// The destination sent FIN (forwarded to the client).
    private var destinationDone = false
    /// The client sent FIN (the socket was shut down for writing).
    private var clientDone = false
    /// Bytes read from the session that the socket did not take yet.
    private var pending: [UInt8] = []
    private var pendingStart = 0
    /// Reading the socket is paused until the session grants credit again.
    private var socketReadPaused = false
    /// Destination bytes read while paused (only after an error or hang-up event), and whether
    /// its EOF came after them.
    private var held: [UInt8] = []
    private var heldStart = 0
    private var heldEOF = false
    static let maxHeld = 8 << 20

    private var session: FrontSession { connection.session }
    private var server: FrontServer { connection.server }

    init(connection: FrontConnection, stream: UInt32, destination: Destination) {
        self.connection = connection
        self.stream = stream
        self.destination = destination
    }

    func start() {
        server.runtime.after(server.connectTimeoutMs) { [weak self] in
            guard let self, !self.connected, !self.finished else { return }
            self.fail(.timedOut)
        }
        // Names are resolved by the outbound, which keeps to the addresses the front allows.
        socket = server.outbound.openStream(to: destination, events: self)
    }

    // MARK: ByteStreamEvents (the destination socket)

    func streamConnected() {
        guard !finished else { return }
        connected = true
        server.stats.streamsOpened += 1
        session.accept(stream: stream)
        Log.debug("stream-open", ["stream": stream, "to": destination])
        // The client may have sent data (and FIN) right after OPEN.
        sessionReadable()
        if !finished { pumpDown() }
    }

    func streamFailed(_ failure: FlowFailure) {
        guard !finished else { return }
        fail(OpenFailReason(failure))
    }

    func streamReadable() {
        guard connected, !finished, let socket else { return }
        if destinationDone {
            // Reads are off after the destination's FIN, so this is an error or hang-up: with
            // our side still open that means a reset (and level-triggered epoll would repeat it).
            if case .failed(let f) = socket.read(into: server.relayBuffer) {
                Log.debug("stream-reset", ["stream": stream, "to": destination, "error": f])
            }
            reset(.connectionReset)
            return
        }
        if socketReadPaused {
            drainWhilePaused(socket)
            return
        }
        pumpDown()
    }

    func streamWritable() { pumpUp() }

    // MARK: from the session

    func sessionReadable() { pumpUp() }

    func sessionWritable() {
        if socketReadPaused {
            socketReadPaused = false
            socket?.setReadInterest(true)
        }
        pumpDown()
    }

    /// The stream is gone with its session or was reset by the client: reset the socket.
    func abandon() {
        guard !finished else { return }
        finished = true
        socket?.reset()
        socket = nil
    }

    // MARK: moving bytes

    private func fail(_ reason: OpenFailReason) {
        finished = true
        server.stats.streamsFailed += 1
        Log.debug("stream-failed", ["stream": stream, "to": destination, "reason": reason])
        socket?.reset()
        socket = nil
        session.refuse(stream: stream, reason: reason)
        connection.relayEnded(stream)
    }

    /// An error or hang-up while reads are paused for credit (epoll reports those regardless):
    /// the rest of the destination's bytes are taken into `held` (bounded) so the event stops.
    private func drainWhilePaused(_ socket: ByteStream) {
        let buffer = server.relayBuffer
        while held.count < Self.maxHeld {
            switch socket.read(into: UnsafeMutableRawBufferPointer(rebasing: buffer[0..<min(buffer.count, Self.maxHeld - held.count)])) {
            case .data(let n): held.append(contentsOf: UnsafeRawBufferPointer(rebasing: buffer[0..<n]))
            case .wouldBlock: return
            case .eof:
                // A hang-up with our side still open is a reset; with our FIN sent, the
                // destination is simply finished and its socket can go (the event stops).
                guard clientDone else { reset(.connectionReset); return }
                heldEOF = true
                socket.close()
                self.socket = nil
                return
            case .failed: reset(.connectionReset); return
            }
        }
        reset(.error)
    }

    /// Sends what `drainWhilePaused` kept; true when it is all sent.
    private func sendHeld() -> Bool {
        while heldStart < held.count {
            let room = session.writableBytes(stream: stream)
            if room <= 0 { return false }
            let n = held.withUnsafeBytes { session.write(stream: stream, UnsafeRawBufferPointer(rebasing: $0[heldStart..<min(held.count, heldStart + room)])) }
            if n <= 0 { return false }
            heldStart += n
            server.stats.bytesDown += UInt64(n)
        }
        held = []
        heldStart = 0
        if heldEOF {
            heldEOF = false
            destinationDone = true
            session.finish(stream: stream)
            endIfDone()
            return false
        }
        return true
    }

    /// Destination → client, while the session has credit for this stream.
    private func pumpDown() {
        guard connected, !finished, !destinationDone else { return }
        if !held.isEmpty || heldEOF {
            if !sendHeld() { return }
        }
        guard let socket else { return }
        let buffer = server.relayBuffer
        while true {
            let room = session.writableBytes(stream: stream)
            if room <= 0 {
                if !socketReadPaused {
                    socketReadPaused = true
                    socket.setReadInterest(false)
                }
                return
            }
            switch socket.read(into: UnsafeMutableRawBufferPointer(rebasing: buffer[0..<min(room, buffer.count)])) {
            case .data(let n):
                let took = session.write(stream: stream, UnsafeRawBufferPointer(rebasing: buffer[0..<n]))
                server.stats.bytesDown += UInt64(took)
                if took < n {
                    // writableBytes promised room; a session that still refuses is broken.
                    reset(.error)
                    return
                }
            case .wouldBlock:
                return
            case .eof:
                destinationDone = true
                session.finish(stream: stream)
                socket.setReadInterest(false)
                endIfDone()
                return
            case .failed(let failure):
                Log.debug("stream-reset", ["stream": stream, "to": destination, "error": failure])
                reset(.connectionReset)
                return
            }
        }
    }

    /// Client → destination, while the socket takes bytes.
    private func pumpUp() {
        guard connected, !finished, let socket else { return }
        if !flushPending(socket) { return }
        guard !clientDone else { return }
        let buffer = server.relayBuffer
        while true {
            switch session.read(stream: stream, into: buffer) {
            case .data(let n):
                server.stats.bytesUp += UInt64(n)
                let written = write(socket, UnsafeRawBufferPointer(rebasing: buffer[0..<n]))
                if written < 0 { reset(.connectionReset); return }
                if written < n {
                    // The socket is full: keep the rest and stop reading the session until it drains.
                    pending = Array(UnsafeRawBufferPointer(rebasing: buffer[written..<n]))
                    pendingStart = 0
                    return
                }
            case .wouldBlock:
                return
            case .eof:
                clientDone = true
                socket.shutdownWrite()
                endIfDone()
                return
            }
        }
    }

    /// Writes what is left of an earlier read; true when nothing is left.
    private func flushPending(_ socket: ByteStream) -> Bool {
        guard pendingStart < pending.count else { return true }
        let n = pending.withUnsafeBytes { write(socket, UnsafeRawBufferPointer(rebasing: $0[pendingStart...])) }
        if n < 0 { reset(.connectionReset); return false }
        pendingStart += n
        if pendingStart < pending.count { return false }
        pending = []
        pendingStart = 0
        return true
    }

    private func write(_ socket: ByteStream, _ bytes: UnsafeRawBufferPointer) -> Int {
        var segment = iovec(iov_base: UnsafeMutableRawPointer(mutating: bytes.baseAddress), iov_len: bytes.count)
        return socket.write(&segment, count: 1)
    }

    private func reset(_ reason: RstReason) {
        guard !finished else { return }
        finished = true
        server.stats.streamsReset += 1
        socket?.reset()
        socket = nil
        session.reset(stream: stream, reason: reason)
        connection.relayEnded(stream)
    }

    /// FIN both ways and nothing left to write: the socket is closed, the id freed.
    private func endIfDone() {
        guard destinationDone, clientDone, pendingStart >= pending.count, !finished else { return }
        finished = true
        socket?.close()
        socket = nil
        session.close(stream: stream)
        connection.relayEnded(stream)
    }
}

/// One UDP association of a session joined to the front's sockets (one per address family, so
/// replies from any remote come back).
final class DatagramRelay: DatagramEvents {
    private unowned let connection: FrontConnection
    let association: UInt32
    private var sockets: DatagramAssociation?
    /// Loop time of the last datagram either way (for the idle timeout).
    var lastActive: UInt64

    init?(connection: FrontConnection, association: UInt32) {
        self.connection = connection
        self.association = association
        lastActive = connection.server.loop.now
        guard let a = connection.server.outbound.openAssociation(events: self) else { return nil }
        sockets = a
    }

    func send(_ payload: UnsafeRawBufferPointer, to destination: Destination) {
        if sockets?.send(payload, to: destination) != true { connection.server.stats.datagramsDropped += 1 }
    }

    func datagramReceived(_ payload: UnsafeRawBufferPointer, from: Endpoint) {
        lastActive = connection.server.loop.now
        let stats = connection.session.send(association: association, from: .ip(from), payload)
        if stats { connection.server.stats.datagramsDown += 1 } else { connection.server.stats.datagramsDropped += 1 }
    }

    func close() {
        sockets?.close()
        sockets = nil
    }
}
