import Foundation
import Glibc
import LoftCore
import LoftProtocol
import XCTest
@testable import LoftFront

/// The state file: the instance table kept across a restart of the front.
final class StateFileTests: XCTestCase {
    private func id(_ n: UInt64) -> InstanceID { InstanceID(high: 0xABCD, low: n) }

    private func tempDir() throws -> String {
        let dir = NSTemporaryDirectory() + "loft-front-state-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        addTeardownBlock { try? FileManager.default.removeItem(atPath: dir) }
        return dir
    }

    private func contents(_ path: String) -> String? {
        guard case .bytes(let b) = StateFile.read(path, maxBytes: FrontState.maxFileBytes) else { return nil }
        return String(decoding: b, as: UTF8.self)
    }

    private func pool() -> AddressPool {
        AddressPool(ipv4: IPPrefix("198.18.64.0/24")!, ipv6: IPPrefix("fd00:64::/64")!)
    }

    // MARK: the format

    func testPoolRoundTripKeepsIdsSlotsAndAddresses() throws {
        let a = pool()
        for n: UInt64 in 1...4 { _ = a.assign(id(n)) }
        a.release(id(2)) // a hole: slot 1 is free
        a.detach(id(3), now: 1000, expiryMs: 600_000)
        let text = FrontState.encode(FrontState.snapshot(of: a, now: 11_000))
        XCTAssertTrue(text.hasPrefix("loft-front-state 1\n"), text)
        XCTAssertTrue(text.contains("instance \(id(3)) 2 198.18.64.4 fd00:64::4 detached 590000\n"), text)
        XCTAssertTrue(text.contains("instance \(id(1)) 0 198.18.64.2 fd00:64::2 attached\n"), text)

        let b = pool()
        let (restored, dropped) = FrontState.restore(try FrontState.decode(Array(text.utf8)), into: b, now: 50_000,
                                                     expiryMs: 600_000)
        XCTAssertEqual(restored, 3)
        XCTAssertTrue(dropped.isEmpty)
        for n: UInt64 in [1, 3, 4] {
            let old = try XCTUnwrap(a.lease(id(n)))
            let new = try XCTUnwrap(b.lease(id(n)))
            XCTAssertEqual(new.slot, old.slot)
            XCTAssertEqual(new.ipv4, old.ipv4)
            XCTAssertEqual(new.ipv6, old.ipv6)
            XCTAssertFalse(new.isAttached, "everything comes back detached")
        }
        XCTAssertNil(b.lease(id(2)))
        // Attached at the save: a full expiry from the load; detached: what was left.
        XCTAssertEqual(b.lease(id(1))?.expiresAt, 650_000)
        XCTAssertEqual(b.lease(id(3))?.expiresAt, 50_000 + 590_000)
        // Round-robin goes on after the last slot handed out; restored slots are not reused.
        XCTAssertEqual(b.nextSlot, a.nextSlot)
        XCTAssertEqual(b.assign(id(9))?.ipv4, IPAddress("198.18.64.6"))
        XCTAssertNil(b.restore(id(10), slot: 0, expiresAt: 1), "a restored slot is taken")
        XCTAssertNotNil(b.attach(id(3)))
    }

    func testExpiryIsCarriedOverAndCapped() throws {
        let text = """
            loft-front-state 1
            next-slot 2
            instance \(id(1)) 0 198.18.64.2 fd00:64::2 detached 2000
            instance \(id(2)) 1 198.18.64.3 fd00:64::3 detached 999999999

            """
        let p = pool()
        let r = FrontState.restore(try FrontState.decode(Array(text.utf8)), into: p, now: 100_000, expiryMs: 60_000)
        XCTAssertEqual(r.restored, 2)
        XCTAssertEqual(p.sweep(now: 101_999), [])
        XCTAssertEqual(p.sweep(now: 102_000).map(\.instanceID), [id(1)])
        XCTAssertEqual(p.sweep(now: 159_999), [])
        XCTAssertEqual(p.sweep(now: 160_000).map(\.instanceID), [id(2)], "never longer than instance-expiry")
    }

    func testEntriesOutsideTheConfiguredPoolsAreDropped() throws {
        let a = pool()
        _ = a.assign(id(1))
        _ = a.assign(id(2))
        let s = try FrontState.decode(Array(FrontState.encode(FrontState.snapshot(of: a, now: 0)).utf8))
        let other = AddressPool(ipv4: IPPrefix("10.9.0.0/24")!, ipv6: IPPrefix("fd00:64::/64")!)
        let r1 = FrontState.restore(s, into: other, now: 0, expiryMs: 1000)
        XCTAssertEqual(r1.restored, 0)
        XCTAssertEqual(r1.dropped.map(\.0.id), [id(1), id(2)])
        // Same IPv4 pool, IPv6 gone: the addresses would not be the same, so dropped too.
        let v4only = AddressPool(ipv4: IPPrefix("198.18.64.0/24")!, ipv6: nil)
        XCTAssertEqual(FrontState.restore(s, into: v4only, now: 0, expiryMs: 1000).restored, 0)
        // A smaller pool keeps what still fits.
        let small = AddressPool(ipv4: IPPrefix("198.18.64.0/30")!, ipv6: IPPrefix("fd00:64::/64")!)
        let r2 = FrontState.restore(s, into: small, now: 0, expiryMs: 1000)
        XCTAssertEqual(r2.restored, 1)
        XCTAssertEqual(r2.dropped.map(\.0.id), [id(2)])
        XCTAssertNotNil(small.lease(id(1)))
    }

    func testCorruptFilesAreRefusedWithAReason() {
        func reason(_ text: String) -> String {
            do {
                _ = try FrontState.decode(Array(text.utf8))
                return "parsed"
            } catch {
                return error.description
            }
        }
        let good = "instance \(id(1)) 0 198.18.64.2 - attached"
        XCTAssertEqual(reason(""), "not a loft-front state file (no \"loft-front-state 1\" first line)")
        XCTAssertEqual(reason("listen: 0.0.0.0:443\n"), "not a loft-front state file (no \"loft-front-state 1\" first line)")
        XCTAssertEqual(reason("loft-front-state 2\n"), "unsupported version \"2\"")
        XCTAssertEqual(reason("loft-front-state 1\n\(good)\n"), "parsed")
        XCTAssertEqual(reason("loft-front-state 1\n\(good)\n\(good)\n"), "line 3: instance \(id(1)) appears twice")
        XCTAssertEqual(reason("loft-front-state 1\ninstance xyz 0 198.18.64.2 - attached\n"),
                       "line 2: instance id must be 32 hex digits, got \"xyz\"")
        XCTAssertEqual(reason("loft-front-state 1\ninstance \(id(1)) 0 fd00::2 - attached\n"),
                       "line 2: not an IPv4 address: \"fd00::2\"")
        XCTAssertEqual(reason("loft-front-state 1\ninstance \(id(1)) 0 198.18.64.2 - detached\n"),
                       "line 2: expected \"attached\" or \"detached MS\"")
        XCTAssertEqual(reason("loft-front-state 1\ninstance \(id(1)) 0 198.18.64.2 - asleep\n"),
                       "line 2: expected \"attached\" or \"detached MS\"")
        XCTAssertEqual(reason("loft-front-state 1\nhello\n"), "line 2: unknown line \"hello\"")
        XCTAssertEqual(reason("loft-front-state 1\ninstance \(id(1)) 0 198.18.64.2 - detached 5\ninstance \(id(1)) 0 198"),
                       "line 3: instance needs 5 or 6 fields, got 3", "a file cut short")
        XCTAssertThrowsError(try FrontState.decode(Array("loft-front-state 1\n".utf8) + [0xFF, 0xFE])) { e in
            XCTAssertEqual("\(e)", "not UTF-8 text")
        }
    }

    func testWritesAreAtomicAndPrivate() throws {
        let path = try tempDir() + "/front.state"
        XCTAssertNil(StateFile.write("one\n", to: path))
        XCTAssertNil(StateFile.write("two\n", to: path))
        XCTAssertEqual(contents(path), "two\n")
        XCTAssertFalse(FileManager.default.fileExists(atPath: path + ".tmp"))
        var st = stat()
        XCTAssertEqual(stat(path, &st), 0)
        XCTAssertEqual(st.st_mode & 0o777, 0o600)
        XCTAssertNotNil(StateFile.write("x", to: "/nonexistent-dir/front.state"))
    }

    // MARK: a real front, stopped without a word and started again

    /// Two instances (one attached, one detached) survive a front that is dropped without a
    /// clean exit: the new front resumes both with the same addresses, and a new HELLO gets
    /// another address.
    func testRestartedFrontResumesInstances() throws {
        let path = try tempDir() + "/front.state"
        let settings = FrontHarness.settings(stateFile: path)
        var a: RawClient!, b: RawClient!
        var first: FrontHarness? = try FrontHarness(settings)
        let h1 = first!
        let ok1 = h1.run([
            { a = h1.dial(); b = h1.dial(.get); return true }, { a.connected && b.connected },
            { a.send(.hello(Hello(token: "secret-1", clientName: "a"))); return true }, { a.status != nil },
            { b.send(.hello(Hello(token: "secret-1", clientName: "b"))); return true }, { b.status != nil },
            { b.carrier?.abort(); return true },
            { h1.server.report().sessionsAttached == 1 && !h1.server.stateDirty },
        ])
        XCTAssertTrue(ok1, "stuck at step \(h1.failedStep ?? -1)")
        let saved = try XCTUnwrap(contents(path))
        XCTAssertTrue(saved.contains("instance \(a.status!.instanceID) 0 198.18.64.2 fd00:64::2 attached"), saved)
        XCTAssertTrue(saved.contains("instance \(b.status!.instanceID) 1 198.18.64.3 fd00:64::3 detached "), saved)
        // No saveState(), no shutdown: as after SIGKILL.
        first = nil

        let h2 = try FrontHarness(settings)
        XCTAssertEqual(h2.server.report().instancesDetached, 2)
        var ra: RawClient!, rb: RawClient!, fresh: RawClient!
        let ok2 = h2.run([
            { ra = h2.dial(); rb = h2.dial(.get); fresh = h2.dial(); return true },
            { ra.connected && rb.connected && fresh.connected },
            { ra.send(.resume(Resume(instanceID: a.status!.instanceID, token: "secret-1")))
              rb.send(.resume(Resume(instanceID: b.status!.instanceID, token: "secret-2")))
              return true },
            { ra.status != nil && rb.status != nil || ra.goAway != nil || rb.goAway != nil },
            { fresh.send(.hello(Hello(token: "secret-1", clientName: "c"))); return true },
            { fresh.status != nil || fresh.goAway != nil },
            { !h2.server.stateDirty },
        ])
        XCTAssertTrue(ok2, "stuck at step \(h2.failedStep ?? -1)")
        XCTAssertNil(ra.goAway.map { "\($0)" })
        XCTAssertEqual(ra.status, a.status)
        XCTAssertEqual(rb.status, b.status)
        XCTAssertEqual(fresh.status?.overlay.ipv4, IPPrefix("198.18.64.4/24"))
        XCTAssertEqual(h2.server.report().sessionsResumed, 2)
        let after = try XCTUnwrap(contents(path))
        XCTAssertEqual(after.split(separator: "\n").filter { $0.hasSuffix(" attached") }.count, 3, after)
    }

    /// A file the front cannot read is left as it is until the table changes, and the front
    /// starts empty.
    func testCorruptFileIsIgnoredAndKeptUntilTheFirstChange() throws {
        let path = try tempDir() + "/front.state"
        XCTAssertNil(StateFile.write("something else entirely\n", to: path))
        let h = try FrontHarness(FrontHarness.settings(stateFile: path))
        XCTAssertEqual(h.server.report().instancesDetached, 0)
        var c: RawClient!
        var untouched = false
        let ok = h.run([
            { c = h.dial(); return true }, { c.connected },
            { untouched = self.contents(path) == "something else entirely\n"; return true },
            { c.send(.hello(Hello(token: "secret-1", clientName: "c"))); return true }, { c.status != nil },
            { !h.server.stateDirty },
        ])
        XCTAssertTrue(ok, "stuck at step \(h.failedStep ?? -1)")
        XCTAssertTrue(untouched, "the corrupt file stays for the operator until the first change")
        XCTAssertTrue(h.server.saveState(final: true))
        let now = try XCTUnwrap(contents(path))
        XCTAssertTrue(now.hasPrefix("loft-front-state 1\n"), now)
        XCTAssertTrue(now.contains("instance \(c.status!.instanceID) 0 "), now)
    }

    /// A clean exit with nothing changed leaves an ignored file alone.
    func testCleanExitKeepsAnIgnoredFile() throws {
        let path = try tempDir() + "/front.state"
        XCTAssertNil(StateFile.write("loft-front-state 9\n", to: path))
        let h = try FrontHarness(FrontHarness.settings(stateFile: path))
        XCTAssertTrue(h.server.saveState(final: true))
        XCTAssertEqual(contents(path), "loft-front-state 9\n")
    }

    /// A clean exit writes the table with every instance detached.
    func testCleanShutdownSavesDetachedInstances() throws {
        let path = try tempDir() + "/front.state"
        let h = try FrontHarness(FrontHarness.settings(stateFile: path))
        var c: RawClient!
        var done = false
        let ok = h.run([
            { c = h.dial(); return true }, { c.connected },
            { c.send(.hello(Hello(token: "secret-1", clientName: "c"))); return true }, { c.status != nil },
            { h.server.shutdown { done = true }; return true }, { done },
        ])
        XCTAssertTrue(ok, "stuck at step \(h.failedStep ?? -1)")
        XCTAssertTrue(h.server.saveState(final: true))
        let saved = try XCTUnwrap(contents(path))
        XCTAssertTrue(saved.contains("instance \(c.status!.instanceID) 0 198.18.64.2 fd00:64::2 detached "), saved)
    }
}
