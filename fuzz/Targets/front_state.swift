// loft-front's state file (state-file): FrontState.decode; a file that decodes encodes again to
// one that decodes equal, and restoring it into an address pool keeps the pool consistent.
import LoftCore
import LoftProtocol
@testable import LoftFront

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOne(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    guard let snapshot = try? FrontState.decode(bytes) else { return 0 }
    guard let again = try? FrontState.decode(Array(FrontState.encode(snapshot).utf8)), again == snapshot else {
        fatalError("state does not survive encode/decode: \(snapshot)")
    }
    let pool = AddressPool(ipv4: IPPrefix("198.18.64.0/24")!, ipv6: IPPrefix("fd00:64::/64")!)
    let (restored, dropped) = FrontState.restore(snapshot, into: pool, now: 1000, expiryMs: 60_000)
    guard restored + dropped.count == snapshot.entries.count, pool.count == restored, restored <= pool.capacity else {
        fatalError("restored \(restored), dropped \(dropped.count) of \(snapshot.entries.count), pool \(pool.count)")
    }
    for l in pool.allLeases {
        guard let a = pool.addresses(ofSlot: l.slot), a.ipv4 == l.ipv4, a.ipv6 == l.ipv6 else { fatalError("lease \(l)") }
    }
    let wasFull = pool.isFull
    let fresh = pool.assign(InstanceID(high: UInt64.max, low: UInt64.max))
    if fresh == nil && !wasFull { fatalError("no slot given while the pool has room") }
    _ = pool.sweep(now: .max)
    if pool.count != (fresh == nil ? 0 : 1) { fatalError("sweep left \(pool.count)") }
    return 0
}
