import Glibc
import LoftControl
import LoftCore
import LoftIO
import LoftTestSupport
import XCTest
@testable import LoftCapture

/// A pcapng stream read back block by block (little-endian, as loft writes it).
private struct Blocks {
    struct Block { var type: UInt32; var body: [UInt8] }
    var blocks: [Block] = []
    var error: String?

    init(_ b: [UInt8]) {
        var i = 0
        while i < b.count {
            guard i + 12 <= b.count else { error = "a block cut short at \(i)"; return }
            let type = Blocks.u32(b, i), len = Int(Blocks.u32(b, i + 4))
            guard len % 4 == 0, len >= 12, i + len <= b.count else { error = "bad length \(len) at \(i)"; return }
            guard Blocks.u32(b, i + len - 4) == UInt32(len) else { error = "trailing length differs at \(i)"; return }
            blocks.append(Block(type: type, body: Array(b[(i + 8)..<(i + len - 4)])))
            i += len
        }
    }

    static func u32(_ b: [UInt8], _ i: Int) -> UInt32 {
        UInt32(b[i]) | UInt32(b[i + 1]) << 8 | UInt32(b[i + 2]) << 16 | UInt32(b[i + 3]) << 24
    }
    static func u16(_ b: [UInt8], _ i: Int) -> UInt16 { UInt16(b[i]) | UInt16(b[i + 1]) << 8 }

    /// The options after `at` bytes of a block's body: code → value.
    static func options(_ body: [UInt8], at: Int) -> [(UInt16, [UInt8])] {
        var out: [(UInt16, [UInt8])] = []
        var i = at
        while i + 4 <= body.count {
            let code = u16(body, i), len = Int(u16(body, i + 2))
            if code == 0 { break }
            out.append((code, Array(body[(i + 4)..<(i + 4 + len)])))
            i += 4 + ((len + 3) & ~3)
        }
        return out
    }
}

/// An IPv4 TCP or UDP packet from 198.18.0.2:40000 to 198.18.0.1:`port`, `payload` bytes long.
private func packet(tcp: Bool, port: UInt16, payload: Int = 10) -> [UInt8] {
    let t = tcp ? 20 : 8
    var p = [UInt8](repeating: 0, count: 20 + t + payload)
    p[0] = 0x45
    p[2] = UInt8((p.count >> 8) & 0xFF); p[3] = UInt8(p.count & 0xFF)
    p[8] = 64; p[9] = tcp ? 6 : 17
    p[12...15] = [198, 18, 0, 2]; p[16...19] = [198, 18, 0, 1]
    p[20] = 0x9C; p[21] = 0x40
    p[22] = UInt8(port >> 8); p[23] = UInt8(port & 0xFF)
    if tcp { p[32] = 0x50; p[33] = 0x18 } else { p[24] = UInt8((8 + payload) >> 8); p[25] = UInt8((8 + payload) & 0xFF) }
    return p
}

final class CaptureRequestTests: XCTestCase {
    func testParsesEveryOption() throws {
        let r = try CaptureRequest.parse("capture input=tun outbound=proxy flow=7 drops snaplen=128 count=5 duration-ms=900 filter=tcp port 80 and host 198.18.0.1").get()
        XCTAssertEqual(r.input, .tun)
        XCTAssertEqual(r.outbound, "proxy")
        XCTAssertEqual(r.flow, 7)
        XCTAssertTrue(r.drops)
        XCTAssertEqual(r.snaplen, 128)
        XCTAssertEqual(r.count, 5)
        XCTAssertEqual(r.durationMs, 900)
        XCTAssertEqual(r.filter, "tcp port 80 and host 198.18.0.1")
        XCTAssertEqual(try CaptureRequest.parse(r.line).get(), r)
        XCTAssertEqual(try CaptureRequest.parse("capture").get(), CaptureRequest())
        XCTAssertEqual(try ControlRequest.parse("capture input=bridge").get(), .capture({ var c = CaptureRequest(); c.input = .bridge; return c }()))
    }

    func testRefusesWithTheReason() {
        func error(_ line: String) -> String {
            if case .failure(let e) = CaptureRequest.parse(line) { return e.description }
            return "accepted"
        }
        XCTAssertTrue(error("capture input=socks").contains("SOCKS5 flows have no packets"), error("capture input=socks"))
        XCTAssertTrue(error("capture input=usb").contains("unknown input \"usb\""))
        XCTAssertTrue(error("capture snaplen=10").contains("snaplen \"10\""))
        XCTAssertTrue(error("capture snaplen=x").contains("snaplen \"x\""))
        XCTAssertTrue(error("capture count=0").contains("count \"0\""))
        XCTAssertTrue(error("capture duration-ms=-1").contains("duration-ms"))
        XCTAssertTrue(error("capture flow=abc").contains("not a flow id"))
        XCTAssertTrue(error("capture input=tun input=all").contains("given twice"))
        XCTAssertTrue(error("capture loud").contains("unknown option \"loud\""))
        XCTAssertTrue(error("capture filter=").contains("needs an expression"))
        XCTAssertTrue(error("capture filter=" + String(repeating: "a", count: 901)).contains("longer than"))
    }
}

final class PcapNGTests: XCTestCase {
    func testBlocksAreWellFormed() {
        var bytes = PcapNG.sectionHeader(application: "loft test", os: "Linux")
        bytes += PcapNG.interfaceDescription(name: "tun0", description: "loft's TUN input", snaplen: 65535)
        let p = packet(tcp: true, port: 80, payload: 3)
        let comment = Array("dropped: rule".utf8)
        var epb: [UInt8] = []
        p.withUnsafeBytes { raw in
            PcapNG.enhancedPacket(interface: 0, micros: 0x1_0000_0002, packet: raw, originalLength: 1000,
                                  direction: .outbound, comment: comment) { epb += $0 }
        }
        XCTAssertEqual(epb.count, PcapNG.enhancedPacketLength(captured: p.count, commentBytes: comment.count))
        bytes += epb
        bytes += PcapNG.interfaceStatistics(interface: 0, start: 1, end: 2, accepted: 9, lost: 4)
        let b = Blocks(bytes)
        XCTAssertNil(b.error)
        XCTAssertEqual(b.blocks.map(\.type), [0x0A0D_0D0A, 1, 6, 5])
        XCTAssertEqual(Blocks.u32(b.blocks[0].body, 0), 0x1A2B_3C4D)
        XCTAssertEqual(Blocks.u16(b.blocks[1].body, 0), 101)
        XCTAssertEqual(Blocks.u32(b.blocks[1].body, 4), 65535)
        let e = b.blocks[2].body
        XCTAssertEqual(Blocks.u32(e, 4), 1)            // timestamp high
        XCTAssertEqual(Blocks.u32(e, 8), 2)            // timestamp low
        XCTAssertEqual(Int(Blocks.u32(e, 12)), p.count)
        XCTAssertEqual(Blocks.u32(e, 16), 1000)
        XCTAssertEqual(Array(e[20..<(20 + p.count)]), p)
        let opts = Blocks.options(e, at: 20 + ((p.count + 3) & ~3))
        XCTAssertEqual(opts.map(\.0), [2, 1])
        XCTAssertEqual(Blocks.u32(opts[0].1, 0), 2)    // outbound
        XCTAssertEqual(opts[1].1, comment)
        let isb = Blocks.options(b.blocks[3].body, at: 12)
        XCTAssertEqual(isb.map(\.0), [2, 3, 6, 7])
        XCTAssertEqual(isb[3].1, [4, 0, 0, 0, 0, 0, 0, 0])
    }

    func testRingWrapsAndRefusesNothingItHasRoomFor() {
        var r = ByteRing(capacity: 10)
        defer { r.deallocate() }
        r.append([1, 2, 3, 4, 5, 6, 7])
        r.consume(5)
        r.append([8, 9, 10, 11, 12, 13])
        XCTAssertEqual(r.count, 8)
        XCTAssertEqual(r.free, 2)
        let (a, b, n) = r.pieces()
        XCTAssertEqual(n, 2)
        let got = Array(UnsafeRawBufferPointer(start: a.iov_base, count: a.iov_len)) + Array(UnsafeRawBufferPointer(start: b.iov_base, count: b.iov_len))
        XCTAssertEqual(got, [6, 7, 8, 9, 10, 11, 12, 13])
    }
}

final class PacketFilterTests: XCTestCase {
    func testCompilesAndMatches() throws {
        let f = try PacketFilter.compile("tcp port 80", snaplen: 65535).get()
        XCTAssertGreaterThan(f.instructions, 0)
        for (p, want) in [(packet(tcp: true, port: 80), true), (packet(tcp: true, port: 81), false), (packet(tcp: false, port: 80), false)] {
            p.withUnsafeBytes { XCTAssertEqual(f.matches($0, captured: $0.count, length: $0.count), want) }
        }
    }

    func testSyntaxErrorSaysWhy() {
        guard case .failure(let e) = PacketFilter.compile("tcp port eighty", snaplen: 100) else { return XCTFail("compiled") }
        XCTAssertTrue(e.description.hasPrefix("filter \"tcp port eighty\": "), e.description)
        XCTAssertGreaterThan(e.description.count, "filter \"tcp port eighty\": ".count)
    }
}

/// The hub and a capture over a real socket pair, on the loop.
final class CaptureHubTests: XCTestCase {
    private var loop: EventLoop!
    private var reader: Int32 = -1
    private var hubSide: Int32 = -1

    override func setUpWithError() throws {
        loop = try EventLoop(clock: VirtualClock())
        (reader, hubSide) = nonblockingSocketPair()
    }

    override func tearDown() { if reader >= 0 { Glibc.close(reader) } }

    private func hub() -> CaptureHub {
        let h = CaptureHub(loop: loop)
        h.add(.init(netif: 0, kind: .tun, name: "tun-test"))
        h.add(.init(netif: 1, kind: .bridge, name: "bridge"))
        h.outboundNames = ["direct"]
        return h
    }

    private func drain() -> (bytes: [UInt8], closed: Bool) {
        var out: [UInt8] = []
        var buf = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = buf.withUnsafeMutableBytes { Glibc.read(reader, $0.baseAddress, $0.count) }
            if n > 0 { out += buf[0..<n]; continue }
            return (out, n == 0)
        }
    }

    func testStreamsFilteredPacketsThenStatistics() throws {
        let h = hub()
        var r = CaptureRequest()
        r.input = .tun
        r.filter = "tcp port 80"
        r.count = 2
        h.start(r, fd: hubSide)
        XCTAssertTrue(h.isActive)
        for (p, netif) in [(packet(tcp: true, port: 80), 0), (packet(tcp: true, port: 22), 0), (packet(tcp: true, port: 80), 1),
                           (packet(tcp: true, port: 80, payload: 30), 0)] {
            p.withUnsafeBytes { h.packet($0, netif: netif, .inbound) }
        }
        var got: [UInt8] = []
        var closed = false
        XCTAssertTrue(loop.run(seconds: 5) { [self] in let d = drain(); got += d.bytes; closed = d.closed; return closed })
        XCTAssertEqual(Array(got.prefix(3)), Array("ok\n".utf8))
        let b = Blocks(Array(got.dropFirst(3)))
        XCTAssertNil(b.error)
        XCTAssertEqual(b.blocks.map(\.type), [0x0A0D_0D0A, 1, 6, 6, 5], "one interface (tun), two packets, its statistics")
        XCTAssertEqual(Int(Blocks.u32(b.blocks[3].body, 12)), 20 + 20 + 30)
        let isb = Blocks.options(b.blocks[4].body, at: 12)
        XCTAssertEqual(isb.first { $0.0 == 6 }?.1.first, 2, "accepted")
        XCTAssertEqual(isb.first { $0.0 == 7 }?.1.first, 0, "lost")
        XCTAssertEqual(h.started, 1)
        XCTAssertFalse(h.isActive, "the count ended it")
    }

    func testASlowReaderLosesPacketsCountedNeverBuffered() {
        let h = hub()
        h.start(CaptureRequest(), fd: hubSide)
        let big = packet(tcp: false, port: 53, payload: 60_000)
        // More than the ring holds, with the loop (and so the writes) not running.
        let n = CaptureHub.ringBytes / big.count + 50
        for _ in 0..<n { big.withUnsafeBytes { h.packet($0, netif: 1, .outbound) } }
        h.stop()
        XCTAssertGreaterThanOrEqual(h.lost, 40)
        var got: [UInt8] = []
        XCTAssertTrue(loop.run(seconds: 10) { [self] in let d = drain(); got += d.bytes; return d.closed })
        let b = Blocks(Array(got.dropFirst(3)))
        XCTAssertNil(b.error)
        let isbs = b.blocks.filter { $0.type == 5 }
        XCTAssertEqual(isbs.count, 2)
        let lost = isbs.compactMap { blk in Blocks.options(blk.body, at: 12).first { $0.0 == 7 } }
            .map { v in v.1.enumerated().reduce(UInt64(0)) { $0 | UInt64($1.element) << (8 * $1.offset) } }.reduce(0, +)
        XCTAssertEqual(lost, h.lost)
        XCTAssertEqual(UInt64(b.blocks.filter { $0.type == 6 }.count) + lost, UInt64(n))
    }

    /// `loft status`'s view of the hub: each running capture with what it asked for and its
    /// packets written and lost so far; none once they end.
    func testStatusListsRunningCaptures() {
        let h = hub()
        XCTAssertTrue(h.status.isEmpty)
        let pair = nonblockingSocketPair()
        let fds = [pair.reader, pair.loftSide]
        defer { Glibc.close(fds[0]) }
        var r = CaptureRequest()
        r.input = .tun
        r.filter = "tcp port 80"
        r.drops = true
        h.start(r, fd: hubSide)
        h.start(CaptureRequest(), fd: fds[1])
        let small = packet(tcp: true, port: 80), big = packet(tcp: false, port: 53, payload: 60_000)
        small.withUnsafeBytes { h.packet($0, netif: 0, .inbound) }
        // More than the second capture's ring holds, the loop not running: it loses some.
        let n = CaptureHub.ringBytes / big.count + 10
        for _ in 0..<n { big.withUnsafeBytes { h.packet($0, netif: 1, .outbound) } }
        let s = h.status
        XCTAssertEqual(s.map(\.id), [1, 2])
        XCTAssertEqual(s[0].summary, "input tun, drops, filter \"tcp port 80\"")
        XCTAssertEqual(s[0].packets, 1)
        XCTAssertEqual(s[0].lost, 0)
        XCTAssertEqual(s[1].summary, "input all")
        XCTAssertEqual(s[1].packets + s[1].lost, UInt64(1 + n))
        XCTAssertGreaterThanOrEqual(s[1].lost, 10)
        h.stop()
        XCTAssertTrue(h.status.isEmpty)
    }

    func testRefusalsAnswerWhy() {
        let h = hub()
        var r = CaptureRequest()
        r.outbound = "nope"
        h.start(r, fd: hubSide)
        XCTAssertFalse(h.isActive)
        let d = drain()
        XCTAssertTrue(String(decoding: d.bytes, as: UTF8.self).hasPrefix("error no outbound named \"nope\""))
        XCTAssertTrue(d.closed)
    }

    func testReaderGoneEndsTheCapture() {
        let h = hub()
        var told: [Bool] = []
        h.activeChanged = { told.append($0) }
        h.start(CaptureRequest(), fd: hubSide)
        XCTAssertTrue(h.isActive)
        Glibc.close(reader); reader = -1
        XCTAssertTrue(loop.run(seconds: 5) { !h.isActive })
        XCTAssertEqual(told, [true, false])
    }

    /// `loft capture`'s Ctrl-C: the reader ends its side; loft ends the capture, its
    /// statistics still reach the reader, then the connection closes.
    func testReaderEndingItsSideGetsTheStatistics() {
        let h = hub()
        h.start(CaptureRequest(), fd: hubSide)
        packet(tcp: true, port: 80).withUnsafeBytes { h.packet($0, netif: 0, .inbound) }
        XCTAssertEqual(shutdown(reader, Int32(SHUT_WR)), 0)
        var got: [UInt8] = []
        XCTAssertTrue(loop.run(seconds: 5) { [self] in let d = drain(); got += d.bytes; return d.closed })
        XCTAssertFalse(h.isActive)
        let b = Blocks(Array(got.dropFirst(3)))
        XCTAssertNil(b.error)
        XCTAssertEqual(b.blocks.map(\.type), [0x0A0D_0D0A, 1, 1, 6, 5, 5])
    }

    /// A packet the netstack drops while taking it in leaves the plain capture and enters the
    /// one that asked for drops, with the reason.
    func testADroppedPacketIsTakenBackAndAnnotated() throws {
        let h = hub()
        let pair = nonblockingSocketPair()
        let fds = [pair.reader, pair.loftSide]
        defer { Glibc.close(fds[0]) }
        h.start(CaptureRequest(), fd: hubSide)
        var r = CaptureRequest()
        r.drops = true
        h.start(r, fd: fds[1])
        let kept = packet(tcp: true, port: 80), dropped = packet(tcp: true, port: 81)
        kept.withUnsafeBytes { h.packet($0, netif: 0, .inbound) }
        dropped.withUnsafeBytes { p in
            h.packet(p, netif: 0, .inbound)
            h.dropped(p, netif: 0, reason: "rule")
        }
        h.stop()
        func stream(_ fd: Int32) -> [UInt8] {
            var out: [UInt8] = []
            var buf = [UInt8](repeating: 0, count: 65536)
            _ = loop.run(seconds: 5) {
                let n = buf.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
                if n > 0 { out += buf[0..<n] }
                return n == 0
            }
            return out
        }
        let plain = Blocks(Array(stream(reader).dropFirst(3))).blocks.filter { $0.type == 6 }
        XCTAssertEqual(plain.count, 1)
        XCTAssertEqual(Array(plain[0].body[20..<(20 + kept.count)]), kept)
        let withDrops = Blocks(Array(stream(fds[0]).dropFirst(3))).blocks.filter { $0.type == 6 }
        XCTAssertEqual(withDrops.count, 2)
        let comment = Blocks.options(withDrops[1].body, at: 20 + ((dropped.count + 3) & ~3)).first { $0.0 == 1 }?.1
        XCTAssertEqual(comment.map { String(decoding: $0, as: UTF8.self) }, "dropped: rule")
    }
}
