import Glibc
import LoftCore
import LoftIO
import LoftNetstack
import XCTest

let appV4 = Endpoint(IPAddress("10.0.0.2")!, 40000)
let remoteV4 = Endpoint(IPAddress("93.184.216.34")!, 80)
let appV6 = Endpoint(IPAddress("fd00::2")!, 40000)
let remoteV6 = Endpoint(IPAddress("2001:db8::1")!, 443)

/// lwIP sends a window update on its own only once the window grew by this much
/// (TCP_WND_UPDATE_THRESHOLD: 4 MSS); a smaller opening waits for its next segment.
let lwipWindowUpdateThreshold = 4 * 1460

/// Segment sizes that fill `window` bytes in an even number of segments, so lwIP's delayed ACK
/// (every second segment) answers the last one at once.
func windowFill(_ window: Int, mss: Int = 1460) -> [Int] {
    var sizes = [Int](repeating: mss, count: window / mss)
    let rest = window % mss
    if rest > 0 { sizes.append(rest) }
    if sizes.count % 2 == 1 {
        // Split the last segment in two.
        let last = sizes.removeLast()
        sizes += [last - last / 2, last / 2]
    }
    return sizes
}

final class HandshakeTests: XCTestCase {
    func testSYNOpensStreamAndHandshakeEstablishesFlow() {
        let h = Harness()
        defer { h.shutdown() }
        var app = AppTCP(local: appV4, remote: remoteV4)
        h.send(app.syn())
        XCTAssertEqual(h.router.calls(.tcp), 1)
        XCTAssertEqual(h.router.requests.first?.source, appV4)
        XCTAssertEqual(h.router.requests.first?.destination, .ip(remoteV4))
        XCTAssertEqual(h.outbound.streams.count, 1)
        XCTAssertEqual(h.outbound.streams.first?.destination, .ip(remoteV4))
        // The SYN is held until the outbound connects: nothing reaches the app yet.
        XCTAssertTrue(h.writer.packets.isEmpty)
        XCTAssertEqual(h.netstack.states["connecting"], 1)

        let stream = h.outbound.streams[0]
        stream.connect()
        h.turn()
        let synAck = h.deliver(to: &app)
        XCTAssertEqual(synAck.count, 1)
        if let s = synAck.first {
            XCTAssertTrue(s.isSYN && s.isACK, "\(s)")
            XCTAssertEqual(s.source, remoteV4)
            XCTAssertEqual(s.destination, appV4)
            XCTAssertEqual(s.ack, app.isn &+ 1)
            XCTAssertNotNil(s.mss)
        }
        XCTAssertEqual(h.netstack.states["handshaking"], 1)

        h.send(app.ackPacket())
        XCTAssertEqual(h.netstack.states["established"], 1)
        XCTAssertEqual(h.netstack.tcpFlowCount, 1)
        XCTAssertEqual(h.netstack.counters.tcpFlowsOpened, 1)
        // Accepted: remote data is wanted now.
        XCTAssertTrue(stream.readInterest)
        let r = Netstack.lwipResources()
        XCTAssertEqual(r.tcpActive, 1)
        XCTAssertEqual(r.tcpListeners, 1)
    }

    func testRetransmittedSYNWhileConnectingOpensNoSecondStream() {
        let h = Harness()
        defer { h.shutdown() }
        var app = AppTCP(local: appV4, remote: remoteV4)
        h.send(app.syn())
        h.send(app.syn())
        XCTAssertEqual(h.outbound.streams.count, 1)
        XCTAssertEqual(h.router.calls(.tcp), 1)
        XCTAssertTrue(h.writer.packets.isEmpty)
    }

    func testIPv6HandshakeAndDataBothWays() {
        let h = Harness()
        defer { h.shutdown() }
        var app = AppTCP(local: appV6, remote: remoteV6)
        let stream = h.establish(&app)
        XCTAssertEqual(stream.destination, .ip(remoteV6))
        XCTAssertEqual(h.netstack.states["established"], 1)
        let up = pattern(2600, seed: 1)
        h.send(app.data(Array(up[0..<1400])), app.data(Array(up[1400...])))
        assertBytes(stream.written, up)
        let down = pattern(20000, seed: 2)
        stream.supply(down)
        h.pumpToApp(&app)
        assertBytes(app.received, down)
    }

    func testRefusedConnectAnswersSYNWithRST() {
        let h = Harness()
        defer { h.shutdown() }
        var app = AppTCP(local: appV4, remote: remoteV4)
        h.send(app.syn())
        h.outbound.streams[0].fail(.refused)
        h.turn()
        let segs = h.deliver(to: &app)
        XCTAssertEqual(segs.count, 1)
        if let s = segs.first {
            XCTAssertTrue(s.isRST, "\(s)")
            XCTAssertEqual(s.ack, app.isn &+ 1)
            XCTAssertEqual(s.source, remoteV4)
            XCTAssertEqual(s.destination, appV4)
        }
        XCTAssertTrue(app.rstReceived)
        XCTAssertEqual(h.netstack.tcpFlowCount, 0)
        XCTAssertEqual(h.netstack.counters.tcpFlowsFailed, 1)
        XCTAssertEqual(Netstack.lwipResources().tcpActive, 0)
    }

    func testDropRuleWithResetAnswersSYNWithRSTAndOpensNothing() {
        let h = Harness()
        defer { h.shutdown() }
        h.router.decision = .drop(reset: true)
        var app = AppTCP(local: appV4, remote: remoteV4)
        h.send(app.syn())
        h.deliver(to: &app)
        XCTAssertTrue(app.rstReceived)
        XCTAssertTrue(h.outbound.streams.isEmpty)
        XCTAssertEqual(h.netstack.tcpFlowCount, 0)
        XCTAssertEqual(h.netstack.counters.dropped(.rule), 1)
    }

    func testHostUnreachableAnswersSYNWithICMPUnreachable() {
        let h = Harness()
        defer { h.shutdown() }
        var app = AppTCP(local: appV4, remote: remoteV4)
        let syn = app.syn()
        h.send(syn)
        h.outbound.streams[0].fail(.hostUnreachable)
        h.turn()
        let packets = h.takePackets()
        XCTAssertEqual(packets.count, 1)
        let icmp = packets.first.flatMap(ICMPMessage.parse)
        XCTAssertNotNil(icmp)
        if let icmp {
            XCTAssertEqual(icmp.type, 3)
            XCTAssertEqual(icmp.code, 1)
            XCTAssertEqual(icmp.source, remoteV4.address)
            XCTAssertEqual(icmp.destination, appV4.address)
            XCTAssertEqual(Array(icmp.quote.prefix(syn.count)), syn)
        }
        XCTAssertEqual(h.netstack.tcpFlowCount, 0)
    }

    func testIPv6HostUnreachableAnswersSYNWithICMPv6() {
        let h = Harness()
        defer { h.shutdown() }
        var app = AppTCP(local: appV6, remote: remoteV6)
        let syn = app.syn()
        h.send(syn)
        h.outbound.streams[0].fail(.hostUnreachable)
        h.turn()
        let icmp = h.takePackets().first.flatMap(ICMPMessage.parse)
        XCTAssertEqual(icmp?.type, 1)
        XCTAssertEqual(icmp?.code, 3)
        XCTAssertEqual(icmp.map { Array($0.quote.prefix(syn.count)) }, syn)
    }
}

final class DataTests: XCTestCase {
    func testAppDataReachesOutboundIntactAndInOrder() {
        let h = Harness()
        defer { h.shutdown() }
        var app = AppTCP(local: appV4, remote: remoteV4)
        let stream = h.establish(&app)
        var sent: [UInt8] = []
        // Three batches of segments of different sizes.
        for (batch, sizes) in [[1460, 1460, 1460, 1460], [100, 7, 1460, 900], [1, 1460]].enumerated() {
            var packets: [[UInt8]] = []
            for (i, n) in sizes.enumerated() {
                let chunk = pattern(n, seed: UInt8(batch * 10 + i))
                sent += chunk
                packets.append(app.data(chunk))
            }
            h.send(batch: packets)
            assertBytes(stream.written, sent, "after batch \(batch)")
        }
        h.deliver(to: &app)
        // lwIP acknowledged everything (the window update after the bytes left carries it).
        XCTAssertEqual(app.peerAck, app.sndNxt)
        XCTAssertEqual(h.netstack.counters.tcpBytesUp, UInt64(sent.count))
    }

    func testSmallOutboundWritesStillCarryEverythingInOrder() {
        let h = Harness()
        defer { h.shutdown() }
        var app = AppTCP(local: appV4, remote: remoteV4)
        let stream = h.establish(&app)
        stream.maxPerWrite = 700
        var sent: [UInt8] = []
        var packets: [[UInt8]] = []
        for i in 0..<10 {
            let chunk = pattern(1460, seed: UInt8(i))
            sent += chunk
            packets.append(app.data(chunk))
        }
        h.send(batch: packets)
        // The outbound takes 700 bytes per write; each short write waits for its next
        // writable event (one per loop turn here).
        for _ in 0..<100 where stream.written.count < sent.count { h.turn() }
        assertBytes(stream.written, sent)
        h.deliver(to: &app)
        XCTAssertEqual(app.peerAck, app.sndNxt)
        XCTAssertGreaterThanOrEqual(Int(app.peerWindow), 65535 - lwipWindowUpdateThreshold, "the window is open again")
    }

    func testRemoteDataReachesAppIntact() {
        let h = Harness()
        defer { h.shutdown() }
        var app = AppTCP(local: appV4, remote: remoteV4)
        let stream = h.establish(&app)
        let data = pattern(300_000, seed: 7)
        stream.supply(data)
        h.pumpToApp(&app)
        XCTAssertEqual(app.received.count, data.count)
        assertBytes(app.received, data)
        XCTAssertEqual(stream.bytesRead, data.count)
        XCTAssertEqual(h.netstack.counters.tcpBytesDown, UInt64(data.count))
    }
}

final class FlowControlTests: XCTestCase {
    /// The outbound takes nothing: the app's window closes after a window's worth, and opens
    /// again as the outbound drains.
    func testSlowOutboundClosesAppWindowAndReopensIt() {
        let h = Harness()
        defer { h.shutdown() }
        var app = AppTCP(local: appV4, remote: remoteV4)
        let stream = h.establish(&app)
        let window = Int(app.peerWindow)
        XCTAssertEqual(window, 65535)
        stream.room = 0
        var sent: [UInt8] = []
        var packets: [[UInt8]] = []
        for (i, n) in windowFill(window).enumerated() {
            let chunk = pattern(n, seed: UInt8(truncatingIfNeeded: i))
            sent += chunk
            packets.append(app.data(chunk))
        }
        h.send(batch: packets)
        h.deliver(to: &app)
        XCTAssertEqual(app.peerAck, app.sndNxt, "lwIP acknowledged the window's worth")
        XCTAssertEqual(app.peerWindow, 0, "the app's window is closed")
        XCTAssertTrue(stream.written.isEmpty)

        // Bytes beyond the closed window are refused (and the refusal acknowledged), so what
        // loft holds for a slow outbound stays bounded by the window.
        let edge = app.sndNxt
        h.send(app.data(pattern(100, seed: 200)))
        app.sndNxt = edge
        let refusal = h.deliver(to: &app)
        XCTAssertFalse(refusal.isEmpty, "lwIP answered the out-of-window segment")
        XCTAssertEqual(refusal.last?.ack, edge, "the out-of-window bytes were not taken")
        XCTAssertEqual(app.peerWindow, 0)

        // Some room: the window opens by what the outbound took.
        stream.grant(20000)
        h.turn()
        h.deliver(to: &app)
        assertBytes(stream.written, Array(sent[0..<20000]))
        XCTAssertEqual(Int(app.peerWindow), 20000)

        // Drained: the whole window is back, and every byte arrived in order.
        stream.room = Int.max
        h.turn()
        h.deliver(to: &app)
        assertBytes(stream.written, sent)
        XCTAssertGreaterThanOrEqual(Int(app.peerWindow), window - lwipWindowUpdateThreshold)

        // And the flow carries on.
        let more = pattern(1000, seed: 99)
        h.send(app.data(more))
        assertBytes(stream.written, sent + more)
    }

    /// The app stops acknowledging, then advertises window 0: loft stops reading the outbound
    /// (bounded bytes taken, read interest off) and resumes when the window opens.
    func testSlowAppPausesOutboundReadsAndResumes() {
        let h = Harness()
        defer { h.shutdown() }
        var app = AppTCP(local: appV4, remote: remoteV4)
        let stream = h.establish(&app)
        let total = 1_000_000
        let data = pattern(total, seed: 3)
        stream.supply(data)

        // No ACKs from the app at all.
        h.turns(5)
        h.deliver(to: &app)
        let taken = stream.bytesRead
        XCTAssertGreaterThan(taken, 0)
        XCTAssertLessThanOrEqual(taken, 2 * 65535, "reads are bounded by lwIP's send buffer")
        XCTAssertFalse(stream.readInterest, "read interest is off while the send buffer is full")
        let reads = stream.readCalls
        h.turns(10)
        XCTAssertEqual(stream.bytesRead, taken)
        XCTAssertEqual(stream.readCalls, reads, "no reads while paused")

        // The app acknowledges what it got but closes its window.
        app.window = 0
        h.send(app.ackPacket())
        h.turns(3)
        h.deliver(to: &app)
        let takenAtZeroWindow = stream.bytesRead
        XCTAssertLessThanOrEqual(takenAtZeroWindow, app.received.count + 2 * 65535)
        XCTAssertFalse(stream.readInterest)
        h.turns(10)
        XCTAssertEqual(stream.bytesRead, takenAtZeroWindow, "nothing more is read while the app's window is 0")

        // Window open again: everything arrives, intact.
        app.window = 65535
        h.send(app.ackPacket())
        h.pumpToApp(&app, rounds: 2000)
        XCTAssertEqual(app.received.count, total)
        assertBytes(app.received, data)
        XCTAssertEqual(stream.bytesRead, total)
    }
}

final class CloseTests: XCTestCase {
    func testAppFINThenRemoteEOFClosesBothSides() {
        let h = Harness()
        defer { h.shutdown() }
        var app = AppTCP(local: appV4, remote: remoteV4)
        let stream = h.establish(&app)
        h.send(app.data(pattern(500)), app.fin())
        h.deliver(to: &app)
        assertBytes(stream.written, pattern(500))
        XCTAssertEqual(stream.shutdownWriteCalls, 1)
        XCTAssertEqual(stream.closeCalls, 0)
        XCTAssertEqual(h.netstack.tcpFlowCount, 1, "half-closed: the remote may still send")
        XCTAssertEqual(app.peerAck, app.sndNxt, "lwIP acknowledged the FIN")

        stream.supply(pattern(800, seed: 5))
        stream.finishSending()
        h.turns(2)
        h.deliver(to: &app)
        assertBytes(app.received, pattern(800, seed: 5))
        XCTAssertTrue(app.finReceived)
        XCTAssertEqual(h.netstack.tcpFlowCount, 0)
        XCTAssertEqual(stream.closeCalls, 1)
        XCTAssertEqual(stream.resetCalls, 0)
        h.send(app.ackPacket())
        let r = Netstack.lwipResources()
        XCTAssertEqual(r.tcpActive, 0, "\(r)")
        XCTAssertEqual(r.tcpTimeWait, 0, "\(r)")
    }

    func testRemoteEOFThenAppFINClosesBothSides() {
        let h = Harness()
        defer { h.shutdown() }
        var app = AppTCP(local: appV4, remote: remoteV4)
        let stream = h.establish(&app)
        stream.supply(pattern(300))
        stream.finishSending()
        h.turns(2)
        h.deliver(to: &app)
        assertBytes(app.received, pattern(300))
        XCTAssertTrue(app.finReceived)
        XCTAssertEqual(h.netstack.tcpFlowCount, 1, "half-closed: the app may still send")
        XCTAssertEqual(stream.closeCalls, 0)

        h.send(app.ackPacket())
        h.send(app.data(pattern(40, seed: 9)), app.fin())
        h.deliver(to: &app)
        assertBytes(stream.written, pattern(40, seed: 9))
        XCTAssertEqual(stream.shutdownWriteCalls, 1)
        XCTAssertEqual(stream.closeCalls, 1)
        XCTAssertEqual(stream.resetCalls, 0)
        XCTAssertEqual(h.netstack.tcpFlowCount, 0)
        XCTAssertEqual(app.peerAck, app.sndNxt, "lwIP acknowledged the FIN")
        let r = Netstack.lwipResources()
        XCTAssertEqual(r.tcpActive, 0, "\(r)")
        XCTAssertEqual(r.tcpTimeWait, 0, "TIME_WAIT is reaped: \(r)")
    }

    func testAppRSTResetsOutbound() {
        let h = Harness()
        defer { h.shutdown() }
        var app = AppTCP(local: appV4, remote: remoteV4)
        let stream = h.establish(&app)
        h.send(app.rst())
        XCTAssertEqual(stream.resetCalls, 1)
        XCTAssertEqual(stream.closeCalls, 0)
        XCTAssertEqual(h.netstack.tcpFlowCount, 0)
        XCTAssertEqual(Netstack.lwipResources().tcpActive, 0)
    }

    func testOutboundReadFailureResetsApp() {
        let h = Harness()
        defer { h.shutdown() }
        var app = AppTCP(local: appV4, remote: remoteV4)
        let stream = h.establish(&app)
        stream.breakReads(.other(ECONNRESET))
        h.turns(2)
        h.deliver(to: &app)
        XCTAssertTrue(app.rstReceived)
        XCTAssertEqual(h.netstack.tcpFlowCount, 0)
        XCTAssertEqual(Netstack.lwipResources().tcpActive, 0)
    }

    func testOutboundStreamFailedWhileOpenResetsApp() {
        let h = Harness()
        defer { h.shutdown() }
        var app = AppTCP(local: appV4, remote: remoteV4)
        let stream = h.establish(&app)
        stream.fail(.other(ECONNRESET))
        h.turns(2)
        h.deliver(to: &app)
        XCTAssertTrue(app.rstReceived, "the app learns the remote reset")
        XCTAssertEqual(h.netstack.tcpFlowCount, 0)
        XCTAssertEqual(Netstack.lwipResources().tcpActive, 0)
    }
}

/// The remote resets while the app's window is closed and loft's send buffer is full (reads
/// paused): the app must get its RST at once, and the dead outbound must not be woken or read
/// over and over.
final class RemoteResetWhilePausedTests: XCTestCase {
    private func pausedFlow(_ h: Harness, _ app: inout AppTCP) -> TestStream {
        let stream = h.establish(&app)
        stream.supply(pattern(1_000_000, seed: 4))
        h.turns(3)
        h.deliver(to: &app)
        app.window = 0
        h.send(app.ackPacket())
        h.turns(3)
        h.deliver(to: &app)
        XCTAssertFalse(stream.readInterest, "setup: reads are paused")
        XCTAssertGreaterThan(stream.unread, 0, "setup: the remote has more to send")
        XCTAssertFalse(app.rstReceived)
        return stream
    }

    func testStreamFailedReachesAppPromptly() {
        let h = Harness()
        defer { h.shutdown() }
        var app = AppTCP(local: appV4, remote: remoteV4)
        let stream = pausedFlow(h, &app)
        let reads = stream.readCalls, wakes = stream.readableEvents
        stream.fail(.other(ECONNRESET))
        h.turns(10)
        h.deliver(to: &app)
        XCTAssertTrue(app.rstReceived, "the app gets an RST")
        XCTAssertEqual(h.netstack.tcpFlowCount, 0)
        XCTAssertLessThanOrEqual(stream.readCalls - reads, 2, "reads after the failure")
        XCTAssertLessThanOrEqual(stream.readableEvents - wakes, 2, "wake-ups after the failure")
    }

    /// The remote's reset is visible only to reads (the end reports nothing while reads are
    /// paused): no wake-up or read while paused, and the app gets its RST once its window opens
    /// and loft reads again.
    func testResetSeenByReadWhilePausedWakesNothingAndResetsAppWhenWindowOpens() {
        let h = Harness()
        defer { h.shutdown() }
        var app = AppTCP(local: appV4, remote: remoteV4)
        let stream = pausedFlow(h, &app)
        let reads = stream.readCalls, wakes = stream.readableEvents
        stream.breakReads(.other(ECONNRESET))
        h.turns(10)
        XCTAssertEqual(stream.readableEvents, wakes, "no wake-ups while paused")
        XCTAssertEqual(stream.readCalls, reads, "no reads while paused")
        XCTAssertEqual(h.netstack.tcpFlowCount, 1)

        app.window = 65535
        h.send(app.ackPacket())
        h.pumpToApp(&app, rounds: 50)
        XCTAssertTrue(app.rstReceived, "the app gets an RST")
        XCTAssertEqual(h.netstack.tcpFlowCount, 0)
        XCTAssertEqual(stream.resetCalls, 1)
        XCTAssertLessThanOrEqual(stream.readCalls - reads, 2, "reads until the failure was seen")
    }
}

final class FlowCapTests: XCTestCase {
    func testOneFlowTooManyEvictsTheLongestIdle() {
        var settings = Netstack.Settings()
        settings.maxFlows = 2
        let h = Harness(settings: settings, clock: VirtualClock())
        defer { h.shutdown() }
        var app1 = AppTCP(local: Endpoint(appV4.address, 40001), remote: remoteV4)
        var app2 = AppTCP(local: Endpoint(appV4.address, 40002), remote: remoteV4)
        var app3 = AppTCP(local: Endpoint(appV4.address, 40003), remote: remoteV4)
        let s1 = h.establish(&app1)
        // Idle times differ by milliseconds (the loop's clock, virtual here).
        h.loop.advance(by: 3)
        h.turn()
        let s2 = h.establish(&app2)
        h.loop.advance(by: 3)
        h.turn()
        // app1 is active again: app2 is now the longest idle.
        h.send(app1.data(pattern(10)))
        assertBytes(s1.written, pattern(10))

        h.send(app3.syn())
        XCTAssertEqual(h.outbound.streams.count, 3, "the third flow was admitted")
        XCTAssertEqual(h.netstack.counters.flowsEvicted, 1)
        XCTAssertEqual(s2.resetCalls, 1, "the longest-idle flow's outbound was reset")
        XCTAssertEqual(s1.resetCalls, 0)
        XCTAssertEqual(h.netstack.tcpFlowCount, 2)
        h.deliver(to: &app2)
        XCTAssertTrue(app2.rstReceived, "the evicted flow's app got an RST")
        h.deliver(to: &app1)
        XCTAssertFalse(app1.rstReceived)

        // The new flow works.
        let s3 = h.outbound.streams[2]
        s3.connect()
        h.turn()
        h.deliver(to: &app3)
        XCTAssertTrue(app3.synAckSeen)
    }
}
