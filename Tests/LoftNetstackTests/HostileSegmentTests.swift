import Glibc
import LoftCore
import LoftIO
import LoftNetstack
import XCTest

/// Segments an app (or whatever else sits in the routed namespace) may send that no correct
/// TCP would: each is dropped or acted on the way a kernel does, and the flow keeps working.
final class HostileSegmentTests: XCTestCase {
    /// The app answers lwIP's SYN-ACK with RST (a SYN scan): the flow and its outbound
    /// connection end at once, not at the connect deadline.
    func testAppRSTToSynAckEndsFlowAndOutboundAtOnce() {
        let h = Harness()
        defer { h.shutdown() }
        var app = AppTCP(local: appV4, remote: remoteV4)
        h.send(app.syn())
        let stream = h.outbound.streams[0]
        stream.connect()
        h.turn()
        h.deliver(to: &app)
        XCTAssertTrue(app.synAckSeen)
        XCTAssertEqual(h.netstack.states["handshaking"], 1)

        // An RST at another sequence number is not acceptable in SYN_RCVD: nothing changes.
        h.send(tcpPacket(from: app.local, to: app.remote, seq: app.isn &+ 5000, ack: 0,
                         flags: PacketSummary.tcpRST, window: 0))
        XCTAssertEqual(h.netstack.states["handshaking"], 1)
        XCTAssertEqual(stream.resetCalls, 0)

        h.send(tcpPacket(from: app.local, to: app.remote, seq: app.isn &+ 1, ack: 0,
                         flags: PacketSummary.tcpRST, window: 0))
        XCTAssertEqual(h.netstack.tcpFlowCount, 0)
        XCTAssertEqual(stream.resetCalls, 1)
        XCTAssertEqual(h.netstack.counters.handshakesReset, 1)
        XCTAssertEqual(Netstack.lwipResources().tcpActive, 0)
    }

    /// An ACK of bytes never sent, with window 0, used to set lwIP's send window to 0 for good
    /// (lwIP 2.1 takes the window before it checks the ACK): now it is dropped and counted.
    func testAckOfUnsentDataWithZeroWindowIsDroppedAndDownloadGoesOn() {
        downloadSurvives(dropped: .tcpBadAck, seed: 3) { app in
            tcpPacket(from: app.local, to: app.remote, seq: app.sndNxt, ack: app.rcvNxt &+ 1_000_000,
                      flags: PacketSummary.tcpACK, window: 0)
        }
    }

    /// A segment starting far beyond the receive window, with window 0, would do the same.
    func testSegmentBeyondTheWindowIsDroppedAndDownloadGoesOn() {
        downloadSurvives(dropped: .tcpOutOfWindow, seed: 4) { app in
            tcpPacket(from: app.local, to: app.remote, seq: app.sndNxt &+ 10_000_000, ack: app.rcvNxt,
                      flags: PacketSummary.tcpACK, window: 0)
        }
    }

    /// A 400,000-byte download under way gets the segment `bogus` makes: it is dropped as
    /// `dropped` (once), and every byte still arrives.
    private func downloadSurvives(dropped reason: PacketDropReason, seed: UInt8, bogus: (AppTCP) -> [UInt8],
                                  file: StaticString = #filePath, line: UInt = #line) {
        let h = Harness()
        defer { h.shutdown() }
        var app = AppTCP(local: appV4, remote: remoteV4)
        let stream = h.establish(&app)
        let data = pattern(400_000, seed: seed)
        stream.supply(data)
        h.turn()
        h.deliver(to: &app)
        h.send(app.ackPacket())
        XCTAssertGreaterThan(app.received.count, 0, file: file, line: line)

        h.send(bogus(app))
        XCTAssertEqual(h.netstack.counters.dropped(reason), 1, file: file, line: line)
        h.pumpToApp(&app, rounds: 400)
        XCTAssertEqual(app.received.count, data.count, "the download stalled", file: file, line: line)
        assertBytes(app.received, data, file: file, line: line)
    }

    /// Out-of-order data is held up to the cap; more is dropped and counted; the bytes still
    /// arrive intact once the app sends them in order.
    func testOutOfOrderDataIsCappedAndUploadStaysIntact() {
        let h = Harness()
        defer { h.shutdown() }
        var app = AppTCP(local: appV4, remote: remoteV4)
        let stream = h.establish(&app)
        let data = pattern(4000, seed: 5)
        let start = app.sndNxt
        // Every second byte after a gap at the first: 1,000 one-byte segments, none in order.
        var batch: [[UInt8]] = []
        for i in stride(from: 1, to: 2000, by: 2) {
            batch.append(tcpPacket(from: app.local, to: app.remote, seq: start &+ UInt32(i), ack: app.rcvNxt,
                                   flags: PacketSummary.tcpACK, window: app.window, payload: [data[i]]))
        }
        h.send(batch: batch)
        let capped = h.netstack.counters.dropped(.tcpReorderCap)
        XCTAssertGreaterThanOrEqual(capped, 1000 - 128)
        XCTAssertLessThan(capped, 1000)
        XCTAssertTrue(stream.written.isEmpty)

        // The whole thing in order.
        _ = h.takePackets()
        for chunk in stride(from: 0, to: data.count, by: 1460) {
            h.send(app.data(Array(data[chunk..<min(chunk + 1460, data.count)])))
        }
        h.turns(3)
        assertBytes(stream.written, data)
    }
}

/// A destination that refuses a datagram (ICMP port unreachable at the outbound's socket):
/// the app hears it the way it would from its own kernel.
final class PortUnreachableTests: XCTestCase {
    func testRefusedDatagramAnswersAppWithICMPPortUnreachable() {
        let h = Harness()
        defer { h.shutdown() }
        let app = Endpoint(IPAddress("10.0.0.2")!, 5353)
        let closed = Endpoint(IPAddress("198.51.100.7")!, 9)
        h.send(udpPacket(from: app, to: closed, payload: Array("hello".utf8)))
        XCTAssertEqual(h.outbound.associations.count, 1)
        _ = h.takePackets()
        h.outbound.associations[0].events?.datagramRefused(by: closed)
        let out = h.takePackets().compactMap(ICMPMessage.parse)
        XCTAssertEqual(out.count, 1)
        guard let m = out.first else { return }
        XCTAssertEqual(m.type, 3)
        XCTAssertEqual(m.code, 3)
        XCTAssertEqual(m.source, closed.address)
        XCTAssertEqual(m.destination, app.address)
        // The quote: the datagram's IPv4 header (app → closed, UDP) and its ports.
        m.quote.withUnsafeBytes { q in
            guard case .success(let s) = PacketSummary.parse(q, maxLength: 65535) else { return XCTFail("quote does not parse") }
            XCTAssertEqual(s.source, app.address)
            XCTAssertEqual(s.destination, closed.address)
            XCTAssertEqual(s.proto, IPProtocol.udp)
            XCTAssertEqual(s.sourcePort, app.port)
            XCTAssertEqual(s.destinationPort, closed.port)
        }
        XCTAssertEqual(h.netstack.counters.portUnreachableSent, 1)
    }

    func testIPv6RefusedDatagramAnswersWithICMPv6PortUnreachable() {
        let h = Harness()
        defer { h.shutdown() }
        let app = Endpoint(IPAddress("fd00::2")!, 5353)
        let closed = Endpoint(IPAddress("2001:db8::7")!, 9)
        h.send(udpPacket(from: app, to: closed, payload: Array("hello".utf8)))
        _ = h.takePackets()
        h.outbound.associations[0].events?.datagramRefused(by: closed)
        let out = h.takePackets().compactMap(ICMPMessage.parse)
        XCTAssertEqual(out.first?.type, 1)
        XCTAssertEqual(out.first?.code, 4)
        XCTAssertEqual(out.first?.source, closed.address)
    }

    /// A scan of closed ports gets at most a burst of 50 at once, then about one per ms.
    func testPortUnreachableIsRateLimited() {
        let h = Harness()
        defer { h.shutdown() }
        let app = Endpoint(IPAddress("10.0.0.2")!, 5353)
        h.send(udpPacket(from: app, to: Endpoint(IPAddress("198.51.100.7")!, 1), payload: [1]))
        _ = h.takePackets()
        for port in 1...500 {
            h.outbound.associations[0].events?.datagramRefused(by: Endpoint(IPAddress("198.51.100.7")!, UInt16(port)))
        }
        let sent = h.netstack.counters.portUnreachableSent
        XCTAssertGreaterThanOrEqual(sent, 50)
        XCTAssertLessThan(sent, 100)
        XCTAssertEqual(sent + h.netstack.counters.icmpRateLimited, 500)
    }
}

/// After a flood the table shrinks and the freed memory goes back to the system, once.
final class MemoryTrimTests: XCTestCase {
    func testTableShrunkFromALargePeakTrimsOnceAfterASecond() {
        let h = Harness(clock: VirtualClock())
        defer { h.shutdown() }
        var syns: [[UInt8]] = []
        for port in 0..<1100 {
            var app = AppTCP(local: Endpoint(IPAddress("10.0.0.2")!, UInt16(20000 + port)), remote: remoteV4)
            syns.append(app.syn())
        }
        h.send(batch: syns)
        XCTAssertEqual(h.netstack.tcpFlowCount, 1100)
        for s in h.outbound.streams { s.fail(.refused) }
        h.turn()
        XCTAssertEqual(h.netstack.tcpFlowCount, 0)
        XCTAssertEqual(h.netstack.counters.memoryTrims, 0, "trimmed at once, per flow")
        let deadline = h.loop.now + 3000
        while h.netstack.counters.memoryTrims == 0 && h.loop.now < deadline {
            h.loop.advance(by: 50)
        }
        XCTAssertEqual(h.netstack.counters.memoryTrims, 1)
        h.turns(3)
        XCTAssertEqual(h.netstack.counters.memoryTrims, 1)
    }
}

/// An input with a large MTU: the SYN-ACK announces an MSS that fits it, and lwIP sends
/// segments that large.
final class LargeSegmentTests: XCTestCase {
    func testMTU65535AnnouncesLargeMSSAndSendsLargeSegments() {
        let h = Harness(mtu: 65535)
        defer { h.shutdown() }
        var app = AppTCP(local: appV4, remote: remoteV4)
        var syn = app.syn()
        // The app announces 65495 (its route MTU 65535).
        syn = tcpPacket(from: app.local, to: app.remote, seq: app.isn, ack: 0, flags: PacketSummary.tcpSYN,
                        window: 65535, mss: 65495)
        h.send(syn)
        let stream = h.outbound.streams[0]
        stream.connect()
        h.turn()
        let synAck = h.deliver(to: &app)
        XCTAssertEqual(synAck.first?.mss, 65495)
        h.send(app.ackPacket())
        XCTAssertEqual(h.netstack.states["established"], 1)
        let data = pattern(300_000, seed: 9)
        stream.supply(data)
        var largest = 0
        for _ in 0..<200 {
            h.turn()
            let segs = h.deliver(to: &app)
            largest = max(largest, segs.map(\.payload.count).max() ?? 0)
            if segs.isEmpty { break }
            if segs.contains(where: { !$0.payload.isEmpty }) { h.send(app.ackPacket()) }
        }
        assertBytes(app.received, data)
        XCTAssertGreaterThan(largest, 1460 * 8, "segments stayed small: \(largest)")
    }

    /// TUN offloads at MTU 1500: the SYN-ACK still announces what fits the MTU, but lwIP sends
    /// segments of up to 64 KiB, each written with the app's MSS as its piece size, and takes
    /// the app's 64 KiB segments whole; without offload such a segment is too large.
    func testOffloadAtMTU1500SendsAndTakesLargeSegments() {
        let h = Harness(mtu: 1500, offload: true)
        defer { h.shutdown() }
        var app = AppTCP(local: appV4, remote: remoteV4)
        _ = app.syn()
        h.send(tcpPacket(from: app.local, to: app.remote, seq: app.isn, ack: 0, flags: PacketSummary.tcpSYN,
                         window: 65535, mss: 1400))
        let stream = h.outbound.streams[0]
        stream.connect()
        h.turn()
        XCTAssertEqual(h.deliver(to: &app).first?.mss, 1460, "announced: what fits the MTU")
        h.send(app.ackPacket())
        let data = pattern(300_000, seed: 3)
        stream.supply(data)
        h.pumpToApp(&app)
        assertBytes(app.received, data)
        let large = h.writer.writes.filter { $0.length > 1500 }
        XCTAssertGreaterThan(large.map(\.length).max() ?? 0, 1460 * 8, "segments stayed small")
        XCTAssertTrue(large.allSatisfy { $0.segmentSize == 1400 }, "piece size: the app's MSS: \(large.prefix(3))")
        XCTAssertTrue(h.writer.writes.filter { $0.length <= 1500 }.allSatisfy { $0.segmentSize == 0 })
        // The app's TSO: one 40,000-byte segment, taken whole.
        let upload = pattern(40_000, seed: 4)
        h.send(app.data(upload))
        h.turns(3)
        assertBytes(stream.written, upload)
        XCTAssertEqual(h.netstack.counters.dropped(.tooLarge), 0)
    }

    /// With offload the flows' MSS is 64 KiB, and this lwIP allocates each new segment at the
    /// MSS (capped at half the app's window): a short answer on each of many flows, not yet
    /// acknowledged, must hold about its own size (200 answers at once: 63,968 bytes of heap;
    /// with segments allocated at the MSS, 6,614,608), and arrive intact.
    func testShortAnswersHoldTheirSizeNotTheMSS() {
        let h = Harness(mtu: 1500, offload: true)
        defer { h.shutdown() }
        var apps: [AppTCP] = []
        var streams: [TestStream] = []
        for i in 0..<200 {
            var app = AppTCP(local: Endpoint(appV4.address, UInt16(20_000 + i)), remote: remoteV4)
            streams.append(establish(h, &app))
            apps.append(app)
        }
        _ = h.takePackets()
        let before = Syscall.heapInUse()
        for (i, s) in streams.enumerated() { s.supply(Array("served \(i)\n".utf8)) }
        h.turns(2)
        let held = Syscall.heapInUse() - before
        XCTAssertLessThan(held, 2 << 20, "200 unacknowledged short answers hold \(held) bytes")
        for i in 0..<apps.count {
            h.deliver(to: &apps[i])
            XCTAssertEqual(apps[i].received, Array("served \(i)\n".utf8))
        }
    }

    /// The app's SYN (MSS 1460), the outbound connects, the SYN-ACK and the app's ACK: the flow
    /// established; its outbound stream.
    func establish(_ h: Harness, _ app: inout AppTCP) -> TestStream {
        _ = app.syn()
        h.send(tcpPacket(from: app.local, to: app.remote, seq: app.isn, ack: 0, flags: PacketSummary.tcpSYN,
                         window: 65535, mss: 1460))
        let stream = h.outbound.streams[h.outbound.streams.count - 1]
        stream.connect()
        h.turn()
        h.deliver(to: &app)
        h.send(app.ackPacket())
        return stream
    }

    /// The app's segments with partial checksums (as the TUN reads them with offload) are
    /// taken unsummed, of odd and even lengths, IPv4 and IPv6, large and small; a segment with
    /// a wrong full checksum is still dropped by lwIP's verification.
    func testPartialChecksumSegmentsAreTakenWithoutSumming() {
        for (local, remote) in [(appV4, remoteV4), (appV6, remoteV6)] {
            let h = Harness(mtu: 1500, offload: true)
            defer { h.shutdown() }
            var app = AppTCP(local: local, remote: remote)
            let stream = establish(h, &app)
            var sent: [UInt8] = []
            for (i, size) in [40_001, 1, 1460, 30_000].enumerated() {
                let chunk = pattern(size, seed: UInt8(10 + i))
                sent += chunk
                h.sendPartial(app.data(chunk))
                h.turns(2)
                h.deliver(to: &app)
            }
            assertBytes(stream.written, sent)
            // A full checksum that is wrong: dropped, nothing more written.
            var bad = app.data(pattern(100, seed: 99))
            bad[bad.count - 1] ^= 0xFF
            h.send(bad)
            h.turns(2)
            XCTAssertEqual(stream.written.count, sent.count, "a corrupt segment was taken")
        }
    }

    /// Packets read into the stack's receive buffer: a large segment is taken in it (the next
    /// read gets another buffer), a small one is copied (the buffer is read into again); the
    /// bytes arrive either way, in order.
    func testLargeSegmentsReadIntoTheReceiveBufferAreTakenWithoutACopy() throws {
        let h = Harness(mtu: 1500, offload: true)
        defer { h.shutdown() }
        var app = AppTCP(local: appV4, remote: remoteV4)
        let stream = establish(h, &app)
        var sent: [UInt8] = []
        for (i, (size, taken)) in [(60_000, true), (1000, false), (40_000, true), (20_000, false)].enumerated() {
            let chunk = pattern(size, seed: UInt8(30 + i))
            sent += chunk
            let packet = app.data(chunk)
            let rx = try XCTUnwrap(h.netstack.receiveBuffer())
            rx.copyMemory(from: UnsafeRawBufferPointer(start: packet, count: packet.count))
            h.netstack.input(UnsafeRawBufferPointer(rebasing: rx[0..<packet.count]), from: h.input)
            let next = try XCTUnwrap(h.netstack.receiveBuffer())
            XCTAssertEqual(next.baseAddress != rx.baseAddress, taken, "segment of \(size) bytes")
            h.turns(2)
            h.deliver(to: &app)
        }
        assertBytes(stream.written, sent)
    }

    /// An input with a 512 KiB receive window: lwIP's SYN-ACK leaves announcing window scale 3
    /// (not its compiled 1, checksum still valid), its later windows are shifted by 3, and the
    /// app may have 512 KiB in flight: eight 64 KiB segments sent back to back are all taken.
    func testLargeWindowAnnouncesItsScaleAndTakesWhatItAnnounced() {
        let h = Harness(mtu: 1500, offload: true)
        defer { h.shutdown() }
        XCTAssertEqual(Netstack.maxWindow, 0xFFFF << 3)
        var app = AppTCP(local: appV4, remote: remoteV4)
        _ = app.syn()
        h.send(tcpPacket(from: app.local, to: app.remote, seq: app.isn, ack: 0, flags: PacketSummary.tcpSYN,
                         window: 65535, mss: 1460, windowScale: 7))
        let stream = h.outbound.streams[0]
        stream.connect()
        h.turn()
        let synAck = h.deliver(to: &app)
        XCTAssertEqual(synAck.first?.windowScale, 3, "\(synAck)")
        h.send(app.ackPacket())
        h.turns(2)
        let segments = h.deliver(to: &app)
        let announced = Int(app.peerWindow) << 3
        XCTAssertGreaterThan(announced, 0x1FFFE, "window after the handshake: \(app.peerWindow) << 3, \(segments)")
        let upload = pattern(8 * 65_000, seed: 5)
        h.send(batch: stride(from: 0, to: upload.count, by: 65_000).map { app.data(Array(upload[$0 ..< $0 + 65_000])) })
        h.turns(3)
        assertBytes(stream.written, upload)
        XCTAssertEqual(h.netstack.counters.dropped(.tcpOutOfWindow), 0)
    }

    func testWithoutOffloadASegmentLargerThanTheMTUIsDropped() {
        let h = Harness(mtu: 1500)
        defer { h.shutdown() }
        var app = AppTCP(local: appV4, remote: remoteV4)
        let stream = h.establish(&app)
        h.send(app.data(pattern(3000)))
        h.turns(2)
        XCTAssertEqual(stream.written.count, 0)
        XCTAssertEqual(h.netstack.counters.dropped(.tooLarge), 1)
        XCTAssertTrue(h.writer.writes.allSatisfy { $0.segmentSize == 0 })
    }

    func testMTU1500KeepsLwIPsMSS() {
        let h = Harness()
        defer { h.shutdown() }
        var app = AppTCP(local: appV4, remote: remoteV4)
        h.send(app.syn())
        h.outbound.streams[0].connect()
        h.turn()
        XCTAssertEqual(h.deliver(to: &app).first?.mss, 1460)
    }
}
