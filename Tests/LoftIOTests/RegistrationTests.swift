import Glibc
import XCTest
@testable import LoftIO

/// Counts readiness reports; `onEvent` runs on each.
private final class Recorder: IOHandler {
    var calls = 0
    var onEvent: (() -> Void)?
    func handleIO(_ events: UInt32) {
        calls += 1
        onEvent?()
    }
}

/// A nonblocking pipe: read end, write end.
private func makePipe() -> (r: Int32, w: Int32) {
    var fds: [Int32] = [-1, -1]
    XCTAssertEqual(pipe(&fds), 0)
    for fd in fds { _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) }
    return (fds[0], fds[1])
}

private func drain(_ fd: Int32) {
    var b = [UInt8](repeating: 0, count: 64)
    while read(fd, &b, b.count) > 0 {}
}

private func signal(_ fd: Int32) {
    var one: UInt8 = 1
    XCTAssertEqual(write(fd, &one, 1), 1)
}

final class RegistrationTests: XCTestCase {
    /// Two pipes are readable in one batch. Whichever handler runs first closes the other's
    /// read end and puts a fresh (empty) pipe's read end on the same number with a new
    /// handler: the old event still in the batch must not reach it.
    func testEventForClosedFDDoesNotReachItsSuccessor() throws {
        let loop = try EventLoop()
        let a = makePipe(), b = makePipe()
        let ha = Recorder(), hb = Recorder(), successor = Recorder()
        var survivor: (r: Int32, w: Int32) = (-1, -1)
        var fresh: (r: Int32, w: Int32) = (-1, -1)
        var batchEnded = false
        var successorCallsInBatch = -1
        func takeOver(own: (r: Int32, w: Int32), victim: (r: Int32, w: Int32)) {
            drain(own.r)
            guard survivor.r < 0 else { return }
            survivor = own
            loop.unregister(victim.r)
            close(victim.r)
            close(victim.w)
            fresh = makePipe()
            if fresh.r != victim.r {
                // The lowest free number went elsewhere (another thread, or the write end):
                // put the new read end on the old number ourselves.
                XCTAssertEqual(dup2(fresh.r, victim.r), victim.r)
                close(fresh.r)
                fresh.r = victim.r
            }
            loop.register(fresh.r, IOEvents.readable, successor)
            // After this batch: record what the successor saw, then make it readable for real.
            loop.soon {
                batchEnded = true
                successorCallsInBatch = successor.calls
                signal(fresh.w)
            }
        }
        ha.onEvent = { takeOver(own: a, victim: b) }
        hb.onEvent = { takeOver(own: b, victim: a) }
        successor.onEvent = {
            drain(fresh.r)
            if batchEnded { loop.stop() }
        }
        loop.register(a.r, IOEvents.readable, ha)
        loop.register(b.r, IOEvents.readable, hb)
        signal(a.w)
        signal(b.w)
        let failsafe = loop.schedule(after: 5000) { loop.stop() }
        loop.run()
        loop.cancel(failsafe)

        XCTAssertGreaterThanOrEqual(survivor.r, 0)
        XCTAssertEqual(successorCallsInBatch, 0, "the old event reached the new registration")
        XCTAssertEqual(successor.calls, 1, "the new registration's own event arrives")
        // The handler whose fd was closed never ran; the other ran once.
        XCTAssertEqual(ha.calls + hb.calls, 1)
        for p in [survivor, fresh] {
            loop.unregister(p.r)
            close(p.r)
            close(p.w)
        }
    }

    /// An fd unregistered inside the batch gets none of the batch's remaining events.
    func testUnregisteredInBatchGetsNothing() throws {
        let loop = try EventLoop()
        let a = makePipe(), b = makePipe()
        let ha = Recorder(), hb = Recorder()
        var unregistered = false
        ha.onEvent = {
            drain(a.r)
            if !unregistered { unregistered = true; loop.unregister(b.r); loop.soon { loop.stop() } }
        }
        hb.onEvent = {
            drain(b.r)
            if !unregistered { unregistered = true; loop.unregister(a.r); loop.soon { loop.stop() } }
        }
        loop.register(a.r, IOEvents.readable, ha)
        loop.register(b.r, IOEvents.readable, hb)
        signal(a.w)
        signal(b.w)
        loop.run()
        XCTAssertEqual(ha.calls + hb.calls, 1)
        for p in [a, b] {
            loop.unregister(p.r)
            close(p.r)
            close(p.w)
        }
    }

    /// modify keeps the registration's generation: events still arrive after it.
    func testModifyKeepsDelivering() throws {
        let loop = try EventLoop()
        let a = makePipe()
        let h = Recorder()
        h.onEvent = { drain(a.r); loop.stop() }
        loop.register(a.r, IOEvents.writable, h)  // a read end is never writable
        loop.modify(a.r, IOEvents.readable)
        signal(a.w)
        let failsafe = loop.schedule(after: 5000) { loop.stop() }
        loop.run()
        loop.cancel(failsafe)
        XCTAssertEqual(h.calls, 1)
        loop.unregister(a.r)
        close(a.r)
        close(a.w)
    }
}
