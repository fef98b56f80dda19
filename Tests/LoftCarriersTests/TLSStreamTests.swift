import Glibc
import LoftCore
import LoftIO
import LoftTLS
import LoftTestSupport
import XCTest
@testable import LoftCarriers

/// A TLS server on 127.0.0.1 that takes one client connection (later ones are closed), with
/// the given buffer sizes; subclasses are its owner.
class OneClientTLSServer: IOHandler, TLSConnectionOwner {
    let runtime: CarrierRuntime
    let context: TLSContext
    private(set) var listenFD: Int32 = -1
    private(set) var port: UInt16 = 0
    let inputBytes: Int
    var conn: TLSConnection?

    init(runtime: CarrierRuntime, inputBytes: Int) throws {
        self.runtime = runtime
        self.inputBytes = inputBytes
        context = try TLSContext(server: TestPKI.shared.server, alpn: [])
        (listenFD, port) = loopbackListener(loop: runtime.loop, backlog: 8, handler: self)
    }

    deinit {
        runtime.loop.unregister(listenFD)
        close(listenFD)
        conn?.abort()
    }

    func handleIO(_ events: UInt32) {
        let fd = accept(listenFD, nil, nil)
        guard fd >= 0, conn == nil else { if fd >= 0 { close(fd) }; return }
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
        conn = TLSConnection.accepted(runtime: runtime, context: context, fd: fd, peer: nil,
                                      inputBytes: inputBytes, outputBytes: 16 * 1024)
        conn?.owner = self
    }

    func tlsReady(_ c: TLSConnection) {}
    func tlsReceived(_ c: TLSConnection) {}
    func tlsFlushed(_ c: TLSConnection) {}
    func tlsEnded(_ c: TLSConnection, reason: CarrierCloseReason?) {}
}

/// Sends `toSend` (never reading, so the client's close_notify stays unread), then closes
/// gracefully.
final class OneShotTLSServer: OneClientTLSServer {
    var toSend: [UInt8] = []
    var sent = 0
    var closing = false

    init(runtime: CarrierRuntime) throws { try super.init(runtime: runtime, inputBytes: 16 * 1024) }

    override func tlsReady(_ c: TLSConnection) {
        c.setReading(false)
        pump()
    }
    override func tlsFlushed(_ c: TLSConnection) { pump() }

    private func pump() {
        guard let c = conn, !closing else { return }
        while sent < toSend.count {
            let n = min(toSend.count - sent, c.outTail)
            if n == 0 { c.flush(); if c.outTail == 0 { return }; continue }
            _ = toSend[sent..<sent + n].withUnsafeBytes { c.append($0) }
            sent += n
            c.flush()
        }
        guard c.pending == 0 else { return }
        closing = true
        c.close(lingerMs: 3000)
    }
}

/// Reads and counts everything it gets.
final class SinkTLSServer: OneClientTLSServer {
    var received = 0

    init(runtime: CarrierRuntime) throws { try super.init(runtime: runtime, inputBytes: 64 * 1024) }

    override func tlsReceived(_ c: TLSConnection) {
        received += c.inEnd - c.inStart
        c.inStart = c.inEnd
    }
}

/// Writes `data` into a stream the way the splice does: one iovec per `chunk` bytes, until a
/// write comes up short, then again on `streamWritable`.
final class TLSStreamWriter: ByteStreamEvents {
    var stream: TLSStream?
    var connected = false
    var failure: FlowFailure?
    let data: [UInt8]
    let chunk: Int
    var offset = 0
    var writableEvents = 0
    init(data: [UInt8], chunk: Int) { self.data = data; self.chunk = chunk }
    func streamConnected(_: ByteStream) { connected = true; pump() }
    func streamFailed(_: ByteStream, _ f: FlowFailure) { failure = f }
    func streamReadable(_: ByteStream) {}
    func streamWritable(_: ByteStream) { writableEvents += 1; pump() }
    func pump() {
        guard let stream else { return }
        while offset < data.count {
            let n = min(chunk, data.count - offset)
            let w = data.withUnsafeBytes { raw -> Int in
                var iov = iovec(iov_base: UnsafeMutableRawPointer(mutating: raw.baseAddress! + offset), iov_len: n)
                return stream.write(&iov, count: 1)
            }
            if w < 0 { failure = .other(EPIPE); return }
            offset += w
            if w < n { return }
        }
    }
}

/// What a TLSStream tells its driver; reads only while `reading`.
final class TLSStreamProbe: ByteStreamEvents {
    var stream: TLSStream?
    var connected = false
    var failure: FlowFailure?
    var received: [UInt8] = []
    var eof = false
    var reading = true
    func streamConnected(_: ByteStream) { connected = true }
    func streamFailed(_: ByteStream, _ f: FlowFailure) { failure = f }
    func streamWritable(_: ByteStream) {}
    func streamReadable(_: ByteStream) {
        guard reading, let stream else { return }
        var buf = [UInt8](repeating: 0, count: 8192)
        while true {
            let r = buf.withUnsafeMutableBytes { stream.read(into: $0) }
            switch r {
            case .data(let n): received += buf[0..<n]
            case .eof: eof = true; return
            case .failed(let f): failure = f; return
            case .wouldBlock: return
            }
        }
    }
}

final class TLSStreamTests: XCTestCase {
    /// The client half-closes, pauses its reads, and the server sends everything and closes:
    /// the hang-up that follows (both directions ended) parks the socket instead of failing the
    /// stream, and once reads resume every byte arrives, then the EOF.
    func testPeerEndsWhileReadsArePausedAfterHalfClose() throws {
        let h = try Harness()
        let server = try OneShotTLSServer(runtime: h.runtime)
        server.toSend = (0..<60_000).map { UInt8(truncatingIfNeeded: $0 &* 7) }
        let context = try TLSContext(client: TLSClientOptions(serverName: "front.test", caFile: TestPKI.shared.ca), alpn: [])
        let p = TLSStreamProbe()
        p.reading = false
        let s = TLSStream(runtime: h.runtime, context: context, host: "127.0.0.1", port: server.port,
                          serverName: "front.test", events: p)
        p.stream = s
        XCTAssertTrue(h.run(seconds: 10) { p.connected || p.failure != nil })
        XCTAssertNil(p.failure)
        var hello: [UInt8] = Array("hello".utf8)
        let w = hello.withUnsafeMutableBytes { raw -> Int in
            var iov = iovec(iov_base: raw.baseAddress, iov_len: raw.count)
            return s.write(&iov, count: 1)
        }
        XCTAssertEqual(w, 5)
        s.shutdownWrite()
        s.setReadInterest(false)
        // The server is done (its linger saw our FIN); give the client's hang-up time to show.
        XCTAssertTrue(h.run(seconds: 10) { server.conn?.state == .closed })
        var waited = false
        h.after(200) { waited = true }
        XCTAssertTrue(h.run(seconds: 5) { waited })
        XCTAssertNil(p.failure, "a clean end while paused is not a failure")
        p.reading = true
        s.setReadInterest(true)
        XCTAssertTrue(h.run(seconds: 10) { p.eof || p.failure != nil })
        XCTAssertNil(p.failure)
        XCTAssertEqual(p.received.count, server.toSend.count)
        XCTAssertTrue(p.received == server.toSend)
        s.close()
    }

    /// Writes far larger than the stream's output buffer (a 64 KiB segment from the TUN's
    /// offload): every byte arrives. A short write happens only when the socket is full, and
    /// then the stream reports `streamWritable` once it drains; it used to return short after
    /// the socket had taken everything, and the writer waited for an event that never came.
    func testWritesLargerThanTheBufferAllArrive() throws {
        let h = try Harness()
        let server = try SinkTLSServer(runtime: h.runtime)
        let context = try TLSContext(client: TLSClientOptions(serverName: "front.test", caFile: TestPKI.shared.ca), alpn: [])
        let data = (0..<(8 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 13) }
        let writer = TLSStreamWriter(data: data, chunk: 200_000)
        let s = TLSStream(runtime: h.runtime, context: context, host: "127.0.0.1", port: server.port,
                          serverName: "front.test", events: writer)
        writer.stream = s
        XCTAssertTrue(h.run(seconds: 10) { writer.connected || writer.failure != nil })
        XCTAssertTrue(h.run(seconds: 20) { server.received == data.count || writer.failure != nil },
                      "written \(writer.offset) of \(data.count), server got \(server.received), writable events \(writer.writableEvents)")
        XCTAssertNil(writer.failure)
        s.close()
    }
}
