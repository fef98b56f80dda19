// Fake-IP DNS in a running loft (docs/fakeip.md): the pool from the config, the mapping read
// from its file at start-up and written back a second after it changes and at stop.
import LoftConfig
import LoftCore
import LoftFakeIP
import LoftIO
import LoftNetstack
import LoftRouting

/// The file's writer: one timer on the loop, armed by a change.
final class FakeIPSaver {
    let fake: FakeIP
    let path: String
    let loop: EventLoop
    private var timer = TimerHandle.none

    init(fake: FakeIP, path: String, loop: EventLoop) {
        self.fake = fake
        self.path = path
        self.loop = loop
    }

    func changed() {
        guard timer == .none else { return }
        timer = loop.schedule(after: 1000) { [weak self] in
            guard let self else { return }
            self.timer = .none
            self.save()
        }
    }

    func save() {
        if timer != .none { loop.cancel(timer); timer = .none }
        if let e = StateFile.write(fake.pool.encoded(), to: path) { Log.warn("fakeip.save-failed", ["error": e]) }
    }
}

extension Runtime {
    /// The fake-IP responder for `netstack`, from `settings`; its saved mapping restored.
    /// Throws a message when the pools give no address.
    public func startFakeIP(_ settings: FakeIPSettings, netstack: Netstack) throws {
        guard let pool = FakeIPPool(ipv4: settings.ipv4, ipv6: settings.ipv6, maxEntries: settings.maxEntries) else {
            throw FakeIPError(message: "fake-ip: the pools hold no address")
        }
        let names = settings.names, exclude = settings.exclude
        let fake = FakeIP(pool: pool, ttl: UInt32(settings.ttl.components.seconds), selects: { name in
            (names.isEmpty || names.contains { Router.domain($0, matches: name) })
                && !exclude.contains { Router.domain($0, matches: name) }
        })
        if let path = settings.file {
            switch StateFile.read(path, maxBytes: 64 + settings.maxEntries * 300) {
            case .missing: break
            case .bytes(let b):
                if let e = fake.restore(String(decoding: b, as: UTF8.self)) {
                    Log.warn("fakeip.file-ignored", ["file": path, "error": e])
                } else {
                    Log.info("fakeip.restored", ["file": path, "names": fake.pool.count])
                }
            case .failed(let e): Log.warn("fakeip.file-ignored", ["file": path, "error": e])
            }
            let saver = FakeIPSaver(fake: fake, path: path, loop: loop)
            fake.changed = { [unowned saver] in saver.changed() }
            fakeIPSaver = saver
        }
        netstack.fakeIP = fake
    }

    /// Writes the mapping now (at stop).
    func saveFakeIP() { fakeIPSaver?.save() }
}

public struct FakeIPError: Error, CustomStringConvertible {
    public var message: String
    public var description: String { message }
}
