import CTLS
import Glibc
import LoftCore
import LoftIO

/// What a TLSConnection tells the carrier that owns it. All calls come from the loop.
package protocol TLSConnectionOwner: AnyObject {
    /// The TCP connection is up and the TLS handshake finished (certificate checked).
    func tlsReady(_ c: TLSConnection)
    /// New bytes are in `c.input` (from `inStart` to `inEnd`); the owner consumes by advancing
    /// `inStart`.
    func tlsReceived(_ c: TLSConnection)
    /// A flush driven by the socket becoming writable finished (space may have freed up).
    func tlsFlushed(_ c: TLSConnection)
    /// The connection ended: `reason` nil for a clean end (close_notify or EOF), else why. The
    /// connection is already torn down; the call comes after the current batch of events, never
    /// from inside a call the owner made.
    func tlsEnded(_ c: TLSConnection, reason: CarrierCloseReason?)
}

/// One TLS 1.3 connection on a nonblocking socket, on the loop: TCP connect (client), the
/// handshake, and two fixed buffers allocated once: `input` (ciphertext is decrypted straight
/// into it) and `output` (the owner writes frames into it; flushes go straight from it to
/// SSL_write). Nothing on the data path allocates.
package final class TLSConnection: IOHandler {
    package enum State { case connecting, handshaking, open, lingering, closed }

    package weak var owner: TLSConnectionOwner?
    package let runtime: CarrierRuntime
    private var loop: EventLoop { runtime.loop }
    private let context: TLSContext
    private let serverName: String?
    package private(set) var fd: Int32 = -1
    private var tls: OpaquePointer?
    package private(set) var state: State
    private var registered = false
    private var mask: UInt32 = 0
    private var addresses = DialAddresses([])
    /// Client: the TCP sockets are made with IPPROTO_MPTCP (Multipath TCP, falling back to TCP).
    private var multipathWanted = false
    package private(set) var peer: Endpoint?

    // Input: [inStart, inEnd) holds bytes not yet consumed by the owner.
    package let input: UnsafeMutableRawPointer
    package let inCap: Int
    package var inStart = 0
    package var inEnd = 0
    // Output: [outStart, outEnd) holds bytes not yet taken by SSL_write.
    package let output: UnsafeMutableRawPointer
    package let outCap: Int
    package var outStart = 0
    package var outEnd = 0

    private var readEnabled = true
    private var handshakeWants = CTLS_WANT_READ
    private var writeWantsWrite = false
    private var writeWantsRead = false
    private var readWantsWrite = false
    private var closeWhenFlushed = false
    /// Half-close requested: close_notify and FIN once the pending output is out; reading goes on.
    private var shutWriteWhenFlushed = false
    /// close_notify and FIN were sent; nothing more may be written.
    package private(set) var writeShut = false
    /// Out of epoll: the peer hung up after our half-close while reads were paused; what it
    /// sent (and its end) waits in the socket until reading resumes.
    private var parked = false
    private var pumpScheduled = false
    /// A read met the end (CTLS_CLOSED or an error) behind bytes the owner has not taken while
    /// it paused reading: handled when reading resumes.
    private var heldEnd: Int?
    private var pumpAction: (() -> Void)!
    /// Read calls per readiness event before yielding to other descriptors.
    private static let readBurst = 16

    package var pending: Int { outEnd - outStart }
    /// Once connected: Multipath TCP with its subflows, or plain TCP (asked by the kernel now).
    package var multipath: Multipath? { state == .closed ? nil : Multipath.of(fd) }
    package var isOpen: Bool { state == .open }
    /// The peer's end came with close_notify (set when reading met the end).
    package private(set) var closeNotified = false
    /// The handshake resumed a session.
    package var resumed: Bool { tls.map { ctls_conn_resumed($0) == 1 } ?? false }
    /// The digest of the server certificate's DER (SHA-256 or SHA-1), once the handshake is done.
    package func peerCertificateHash(sha256: Bool) -> [UInt8]? {
        guard let tls else { return nil }
        var out = [UInt8](repeating: 0, count: sha256 ? 32 : 20)
        return ctls_conn_peer_cert_hash(tls, sha256 ? 1 : 0, &out) == 0 ? out : nil
    }
    package var tlsVersion: String { tls.map { String(cString: ctls_conn_version($0)) } ?? "" }
    package var tlsCipher: String { tls.map { String(cString: ctls_conn_cipher($0)) } ?? "" }
    package var alpn: String {
        guard let tls else { return "" }
        var buf = [CChar](repeating: 0, count: 64)
        _ = ctls_conn_alpn(tls, &buf, buf.count)
        return cString(buf)
    }

    private init(runtime: CarrierRuntime, context: TLSContext, serverName: String?, state: State,
                 inputBytes: Int, outputBytes: Int) {
        self.runtime = runtime
        self.context = context
        self.serverName = serverName
        self.state = state
        inCap = inputBytes
        outCap = outputBytes
        input = UnsafeMutableRawPointer.allocate(byteCount: inputBytes, alignment: 16)
        output = UnsafeMutableRawPointer.allocate(byteCount: outputBytes, alignment: 16)
        pumpAction = { [weak self] in
            guard let self else { return }
            self.pumpScheduled = false
            self.pumpRead()
        }
    }

    /// Client: connect to the first address that answers, then handshake. `multipath`: over
    /// Multipath TCP when the kernel and the peer have it, else TCP (`multipath` tells which).
    package static func dial(runtime: CarrierRuntime, context: TLSContext, serverName: String, addresses: [Endpoint],
                     inputBytes: Int, outputBytes: Int, multipath: Bool = false, owner: TLSConnectionOwner) -> TLSConnection {
        let c = TLSConnection(runtime: runtime, context: context, serverName: serverName, state: .connecting,
                              inputBytes: inputBytes, outputBytes: outputBytes)
        c.owner = owner
        c.multipathWanted = multipath
        c.addresses = DialAddresses(addresses)
        c.connectNext(lastError: nil)
        return c
    }

    /// Server: an accepted socket; the handshake starts when the client speaks.
    package static func accepted(runtime: CarrierRuntime, context: TLSContext, fd: Int32, peer: Endpoint?,
                         inputBytes: Int, outputBytes: Int) -> TLSConnection? {
        let c = TLSConnection(runtime: runtime, context: context, serverName: nil, state: .handshaking,
                              inputBytes: inputBytes, outputBytes: outputBytes)
        c.fd = fd
        c.peer = peer
        guard let t = ctls_conn_new(context.raw, fd, nil) else {
            c.fd = -1
            return nil
        }
        c.tls = t
        c.setMask(IOEvents.readable)
        return c
    }

    deinit {
        teardown()
        input.deallocate()
        output.deallocate()
    }

    // MARK: connecting

    private func connectNext(lastError: String?) {
        guard state == .connecting else { return }
        guard let endpoint = addresses.next(failed: lastError) else {
            end(.connectFailed(addresses.lastError))
            return
        }
        let s = Sockets.makeStream(family: Sockets.family(of: endpoint), multipath: multipathWanted)
        guard s >= 0 else {
            let e = String(cString: strerror(Sockets.errno))
            loop.soon { [weak self] in self?.connectNext(lastError: e) }
            return
        }
        Syscall.setNoDelay(s)
        if case .failure(let failure) = Syscall.connect(s, to: SocketAddress(endpoint)), failure != .inProgress {
            let e = "\(endpoint): " + failure.description
            _ = Syscall.close(s)
            loop.soon { [weak self] in self?.connectNext(lastError: e) }
            return
        }
        fd = s
        peer = endpoint
        setMask(IOEvents.writable)
    }

    private func connected() {
        guard let t = ctls_conn_new(context.raw, fd, serverName) else {
            fail("cannot set up a TLS connection for \(serverName ?? "")")
            return
        }
        tls = t
        state = .handshaking
        handshake()
    }

    private func handshake() {
        guard let tls else { return }
        let r = Int(ctls_handshake(tls))
        switch r {
        case CTLS_OK:
            state = .open
            updateMask()
            owner?.tlsReady(self)
            // Application bytes may already sit in OpenSSL's read-ahead buffer.
            schedulePump()
        case CTLS_WANT_READ, CTLS_WANT_WRITE:
            handshakeWants = r
            updateMask()
        default:
            fail(String(cString: ctls_conn_error(tls)))
        }
    }

    // MARK: readiness

    private func setMask(_ m: UInt32) {
        guard fd >= 0, !parked, m != mask || !registered else { return }
        mask = m
        if registered { loop.modify(fd, m) } else { loop.register(fd, m, self); registered = true }
    }

    private func updateMask() {
        switch state {
        case .connecting: setMask(IOEvents.writable)
        case .handshaking: setMask(handshakeWants == CTLS_WANT_WRITE ? IOEvents.writable : IOEvents.readable)
        case .open, .lingering:
            var m: UInt32 = 0
            if readEnabled || writeWantsRead || state == .lingering { m |= IOEvents.readable }
            if writeWantsWrite || readWantsWrite { m |= IOEvents.writable }
            setMask(m)
        case .closed: break
        }
    }

    package func handleIO(_ ev: UInt32) {
        switch state {
        case .connecting:
            let err = Syscall.socketError(fd)
            if err != 0 || ev & (IOEvents.error | IOEvents.hangup) != 0 {
                let e = "\(peer.map { "\($0)" } ?? ""): " + String(cString: strerror(err != 0 ? err : ECONNREFUSED))
                dropSocket()
                connectNext(lastError: e)
                return
            }
            if ev & IOEvents.writable != 0 { connected() }
        case .handshaking:
            handshake()
        case .open:
            if ev & IOEvents.writable != 0 {
                if readWantsWrite { readWantsWrite = false; updateMask(); pumpRead() }
                if writeWantsWrite && state == .open {
                    writeWantsWrite = false
                    updateMask()
                    flush()
                    if state == .open { owner?.tlsFlushed(self) }
                }
            }
            guard state == .open else { return }
            if ev & (IOEvents.readable | IOEvents.error | IOEvents.hangup) != 0 {
                if writeWantsRead {
                    writeWantsRead = false
                    updateMask()
                    flush()
                    if state == .open { owner?.tlsFlushed(self) }
                }
                if readEnabled {
                    pumpRead()
                } else if ev & IOEvents.error == 0 && ev & IOEvents.hangup != 0 && writeShut {
                    // Both directions ended cleanly (our half-close, then the peer's FIN) while
                    // reads are paused: epoll would report the hang-up again and again, so the
                    // socket leaves it until reading resumes; the peer's last bytes wait there.
                    if registered { loop.unregister(fd) }
                    registered = false
                    parked = true
                } else if ev & (IOEvents.error | IOEvents.hangup) != 0 {
                    // Paused, but the socket failed: reading is the only way to learn why.
                    let err = Syscall.socketError(fd)
                    end(.io(err != 0 ? String(cString: strerror(err)) : "connection hung up"))
                }
            }
        case .lingering:
            linger()
        case .closed:
            break
        }
    }

    // MARK: reading

    package func setReading(_ on: Bool) {
        guard readEnabled != on else { return }
        readEnabled = on
        if on && parked { parked = false }
        if state == .open {
            updateMask()
            if on { schedulePump() }
        }
    }

    private func schedulePump() {
        guard !pumpScheduled else { return }
        pumpScheduled = true
        loop.soon(pumpAction)
    }

    /// Moves unconsumed input to the front of the buffer.
    package func compactInput() {
        if inStart == inEnd { inStart = 0; inEnd = 0; return }
        guard inStart > 0 else { return }
        memmove(input, input + inStart, inEnd - inStart)
        inEnd -= inStart
        inStart = 0
    }

    /// Reads records into the input buffer until the socket (and OpenSSL's read-ahead) has no
    /// more or the buffer is full, then tells the owner once: one delivery per batch of records,
    /// not one per 16 KiB record (each delivery runs the carrier's parser, the session and the
    /// relay's write).
    private func pumpRead() {
        guard let tls else { return }
        if let r = heldEnd {
            guard state == .open && readEnabled else { return }
            heldEnd = nil
            readEnded(tls, r)
            return
        }
        var rounds = 0
        var fresh = false
        while state == .open && readEnabled {
            // A burst's worth read, or the buffer full: what came goes to the owner first.
            if fresh && (rounds == Self.readBurst || inEnd == inCap) {
                fresh = false
                owner?.tlsReceived(self)
                continue
            }
            if rounds == Self.readBurst { schedulePump(); return }
            if inStart == inEnd { inStart = 0; inEnd = 0 }
            if inEnd == inCap {
                compactInput()
                if inEnd == inCap { end(.io("input buffer full (\(inCap) bytes unconsumed)")); return }
            }
            let r = ctls_read(tls, input + inEnd, inCap - inEnd)
            if r > 0 {
                inEnd += r
                rounds += 1
                fresh = true
                continue
            }
            if fresh {
                // What came before the socket ran dry (or ended) goes to the owner first.
                fresh = false
                owner?.tlsReceived(self)
                guard state == .open else { return }
                if !readEnabled && Int(r) != CTLS_WANT_READ && Int(r) != CTLS_WANT_WRITE {
                    // The owner paused with bytes to take: the end waits behind them, as it
                    // did when each record was handed over before the next read.
                    heldEnd = Int(r)
                    return
                }
            }
            readEnded(tls, Int(r))
            return
        }
    }

    /// A read that brought no bytes: wait for the socket, or the end (clean or failed).
    private func readEnded(_ tls: OpaquePointer, _ r: Int) {
        switch r {
        case CTLS_WANT_READ:
            return
        case CTLS_WANT_WRITE:
            readWantsWrite = true
            updateMask()
        case CTLS_CLOSED:
            closeNotified = ctls_conn_close_notify(tls) == 1
            end(nil)
        default:
            fail(String(cString: ctls_conn_error(tls)))
        }
    }

    // MARK: writing

    /// Free bytes at the tail of the output buffer.
    package var outTail: Int { outCap - outEnd }

    /// Moves pending output to the front; returns how far it moved (owners shift the offsets
    /// they keep into the buffer by this much).
    @discardableResult
    package func compactOutput() -> Int {
        if outStart == outEnd { let s = outStart; outStart = 0; outEnd = 0; return s }
        guard outStart > 0 else { return 0 }
        let shift = outStart
        memmove(output, output + outStart, outEnd - outStart)
        outEnd -= shift
        outStart = 0
        return shift
    }

    /// Appends raw bytes (handshake text, control frames). False if they do not fit.
    package func append(_ bytes: UnsafeRawBufferPointer) -> Bool {
        if outTail < bytes.count { compactOutput() }
        guard outTail >= bytes.count else { return false }
        if let b = bytes.baseAddress { (output + outEnd).copyMemory(from: b, byteCount: bytes.count) }
        outEnd += bytes.count
        return true
    }

    package func append(_ text: String) -> Bool {
        var t = text
        return t.withUTF8 { append(UnsafeRawBufferPointer($0)) }
    }

    /// Writes pending output until it is gone or the socket is full.
    package func flush() {
        guard let tls, state == .open || state == .lingering && closeWhenFlushed else { return }
        while outStart < outEnd {
            let r = ctls_write(tls, output + outStart, outEnd - outStart)
            if r > 0 { outStart += r; continue }
            switch Int(r) {
            case CTLS_WANT_WRITE:
                writeWantsWrite = true
                updateMask()
                return
            case CTLS_WANT_READ:
                writeWantsRead = true
                updateMask()
                return
            default:
                fail(String(cString: ctls_conn_error(tls)))
                return
            }
        }
        outStart = 0
        outEnd = 0
        if closeWhenFlushed { startLinger() }
        else if shutWriteWhenFlushed && state == .open { shutWriteNow() }
    }

    /// Half-close: once the pending output is out, close_notify and a TCP FIN; the peer's bytes
    /// are still read until it ends too.
    package func shutdownWrite() {
        guard state == .open, !writeShut else { return }
        shutWriteWhenFlushed = true
        if outStart == outEnd { shutWriteNow() }
    }

    private func shutWriteNow() {
        guard let tls, !writeShut else { return }
        shutWriteWhenFlushed = false
        writeShut = true
        _ = ctls_shutdown(tls)
        _ = Syscall.shutdown(fd, Int32(SHUT_WR))
    }

    // MARK: closing

    /// Graceful: sends what is pending, then close_notify and FIN, then reads and discards
    /// until the peer closes too (at most `lingerMs`), so a last frame is not lost to a reset.
    /// The owner hears nothing more.
    package func close(lingerMs: UInt64 = 2000) {
        owner = nil
        switch state {
        case .open:
            readEnabled = false
            updateMask()
            closeWhenFlushed = true
            runtime.after(lingerMs) { [weak self] in self?.teardown() }
            flush()
        case .connecting, .handshaking:
            teardown()
        case .lingering, .closed:
            break
        }
    }

    /// Immediate: the socket is closed now.
    package func abort() {
        owner = nil
        teardown()
    }

    private func startLinger() {
        guard let tls, state == .open else { return }
        closeWhenFlushed = false
        state = .lingering
        _ = ctls_shutdown(tls)
        _ = Syscall.shutdown(fd, Int32(SHUT_WR))
        updateMask()
        linger()
    }

    private func linger() {
        guard fd >= 0 else { return }
        // Discard whatever still arrives, without decrypting it, until EOF.
        while true {
            switch Syscall.recv(fd, input, inCap) {
            case .success(let n) where n > 0: continue
            case .failure(let e) where e.wouldBlock: return
            default:
                teardown()
                return
            }
        }
    }

    private func end(_ reason: CarrierCloseReason?) {
        guard state != .closed else { return }
        let o = owner
        owner = nil
        teardown()
        loop.soon { [weak o] in o?.tlsEnded(self, reason: reason) }
    }

    private func fail(_ message: String) { end(.tls(message)) }

    private func dropSocket() {
        if fd >= 0 {
            if registered { loop.unregister(fd) }
            registered = false
            _ = Syscall.close(fd)
            fd = -1
        }
        mask = 0
    }

    private func teardown() {
        state = .closed
        if let tls { ctls_conn_free(tls) }
        tls = nil
        dropSocket()
        inStart = 0; inEnd = 0; outStart = 0; outEnd = 0
    }
}

/// Formats TLS details of a connection for logs.
package func describeTLS(_ c: TLSConnection?) -> String {
    guard let c, c.isOpen else { return "" }
    let a = c.alpn
    return "\(c.tlsVersion) \(c.tlsCipher)" + (a.isEmpty ? "" : " alpn=\(a)")
}
