/// A bare TCP acknowledgment as the stack sends it: IPv4 or IPv6 (no extension headers), flags
/// exactly ACK, no payload. Used to thin out a batch of outgoing packets: of two such ACKs for
/// the same connection queued back to back, the later one says everything the earlier one did
/// (ACKs are cumulative, the window is the newest), so the earlier need not be sent.
public enum PureAck {
    /// Byte range of the connection's addresses and the offset of its TCP header, when `p` is
    /// a pure ACK.
    @inline(__always)
    static func layout(_ p: UnsafeRawBufferPointer) -> (addresses: Range<Int>, tcp: Int)? {
        guard p.count >= 40 else { return nil }
        let version = p[0] >> 4
        let addresses: Range<Int>
        let tcp: Int
        if version == 4 {
            tcp = Int(p[0] & 0x0F) * 4
            guard tcp >= 20, p[9] == IPProtocol.tcp, p.count >= tcp + 20 else { return nil }
            // Not a fragment (MF clear, offset zero).
            guard p[6] & 0x3F == 0, p[7] == 0 else { return nil }
            addresses = 12..<20
        } else if version == 6 {
            tcp = 40
            guard p[6] == IPProtocol.tcp, p.count >= 60 else { return nil }
            addresses = 8..<40
        } else {
            return nil
        }
        let dataOffset = Int(p[tcp + 12] >> 4) * 4
        guard dataOffset >= 20, p[tcp + 13] == 0x10, p.count == tcp + dataOffset else { return nil }
        return (addresses, tcp)
    }

    /// True when `p` is a bare ACK (see above).
    public static func matches(_ p: UnsafeRawBufferPointer) -> Bool { layout(p) != nil }

    /// True when `later` makes `earlier` redundant: both are pure ACKs of the same connection
    /// and direction, and `later` acknowledges more, or the same with another window (a window
    /// update). Two equal ACKs with equal windows are duplicate ACKs, which the sender counts
    /// for fast retransmit: both are kept.
    public static func supersedes(_ later: UnsafeRawBufferPointer, _ earlier: UnsafeRawBufferPointer) -> Bool {
        guard later.count == earlier.count, let a = layout(later), let b = layout(earlier), a == b else { return false }
        for i in a.addresses where later[i] != earlier[i] { return false }
        for i in a.tcp..<(a.tcp + 4) where later[i] != earlier[i] { return false }  // ports
        let newAck = later.loadUnaligned(fromByteOffset: a.tcp + 8, as: UInt32.self).bigEndian
        let oldAck = earlier.loadUnaligned(fromByteOffset: a.tcp + 8, as: UInt32.self).bigEndian
        let advance = Int32(bitPattern: newAck &- oldAck)
        if advance > 0 { return true }
        if advance < 0 { return false }
        return later[a.tcp + 14] != earlier[a.tcp + 14] || later[a.tcp + 15] != earlier[a.tcp + 15]
    }
}

extension PureAck {
    /// True when `p` is a TCP segment (IPv4 not fragmented, or IPv6 without extension headers)
    /// of the same connection and direction as `ack`, a bare ACK.
    static func sameConnection(_ p: UnsafeRawBufferPointer, as ack: UnsafeRawBufferPointer) -> Bool {
        guard let a = layout(ack), p.count >= a.tcp + 4, p[0] == ack[0] else { return false }
        if p[0] >> 4 == 4 {
            guard p[9] == IPProtocol.tcp, p[6] & 0x3F == 0, p[7] == 0 else { return false }
        } else {
            guard p[6] == IPProtocol.tcp else { return false }
        }
        for i in a.addresses where p[i] != ack[i] { return false }
        for i in a.tcp..<(a.tcp + 4) where p[i] != ack[i] { return false }
        return true
    }

    /// A number from exactly the bytes `sameConnection` compares (the first byte, the
    /// addresses, the ports), so two packets it calls the same connection have the same tag:
    /// a held ACK is compared byte by byte only with packets whose tag is its own. nil: not an
    /// IPv4 or IPv6 packet long enough to have them (never the same connection as an ACK).
    @inline(__always)
    static func connectionTag(_ p: UnsafeRawBufferPointer) -> UInt64? {
        guard p.count >= 20 else { return nil }
        let mix: UInt64 = 0x9E37_79B9_7F4A_7C15
        switch p[0] >> 4 {
        case 4:
            let t = Int(p[0] & 0x0F) * 4
            guard p.count >= t + 4 else { return nil }
            let ports = UInt64(p.loadUnaligned(fromByteOffset: t, as: UInt32.self))
            return p.loadUnaligned(fromByteOffset: 12, as: UInt64.self) ^ (ports &* mix) ^ UInt64(p[0])
        case 6:
            guard p.count >= 44 else { return nil }
            var a = p.loadUnaligned(fromByteOffset: 8, as: UInt64.self)
            a = a &* mix ^ p.loadUnaligned(fromByteOffset: 16, as: UInt64.self)
            a = a &* mix ^ p.loadUnaligned(fromByteOffset: 24, as: UInt64.self)
            a = a &* mix ^ p.loadUnaligned(fromByteOffset: 32, as: UInt64.self)
            let ports = UInt64(p.loadUnaligned(fromByteOffset: 40, as: UInt32.self))
            return a ^ (ports &* mix) ^ UInt64(p[0])
        default:
            return nil
        }
    }
}

/// Bare ACKs held back until the end of a batch of events, at most one per connection: of the
/// ACKs a stack sends for one connection during a batch only the last is needed (see
/// `PureAck.supersedes`), also when the batch interleaves several connections. A connection's
/// other segments never overtake its held ACK, which leaves just before them; across
/// connections order does not matter. Fixed storage: `slots` connections at once (a full
/// table is written out before holding another), no allocation after init.
public final class AckCoalescer {
    public static let slots = 8
    public static let slotSize = 128
    private let storage: UnsafeMutableRawBufferPointer
    private var lengths = [Int](repeating: 0, count: AckCoalescer.slots)
    /// Each held ACK's `PureAck.connectionTag`.
    private var tags = [UInt64](repeating: 0, count: AckCoalescer.slots)
    /// Slots 0..<held are in use.
    public private(set) var held = 0
    /// ACKs not written because a later one of the same connection replaced them.
    public private(set) var coalesced: UInt64 = 0
    /// Writes a held ACK out (called from `pass`, `release` and `flush`); an owner that is
    /// made after its coalescer sets it once it can name itself.
    public var emit: (UnsafeRawBufferPointer) -> Void

    /// `emit` writes a held ACK out (called from `pass`, `release` and `flush`).
    public init(emit: @escaping (UnsafeRawBufferPointer) -> Void) {
        self.emit = emit
        storage = .allocate(byteCount: Self.slots * Self.slotSize, alignment: 16)
    }

    deinit { storage.deallocate() }

    private func slot(_ i: Int) -> UnsafeMutableRawBufferPointer {
        UnsafeMutableRawBufferPointer(rebasing: storage[i * Self.slotSize ..< i * Self.slotSize + lengths[i]])
    }

    private func store(_ p: UnsafeRawBufferPointer, at i: Int, tag: UInt64) {
        (storage.baseAddress! + i * Self.slotSize).copyMemory(from: p.baseAddress!, byteCount: p.count)
        lengths[i] = p.count
        tags[i] = tag
    }

    private func remove(_ i: Int) {
        held -= 1
        if i != held { store(UnsafeRawBufferPointer(slot(held)), at: i, tag: tags[held]) }
    }

    /// A packet about to be written. A bare ACK is held (true: the caller writes nothing);
    /// anything else releases its connection's held ACK first (false: the caller writes it).
    public func pass(_ p: UnsafeRawBufferPointer) -> Bool {
        guard p.count <= Self.slotSize, PureAck.matches(p), let tag = PureAck.connectionTag(p) else {
            release(before: p)
            return false
        }
        for i in 0..<held where tags[i] == tag && PureAck.sameConnection(p, as: UnsafeRawBufferPointer(slot(i))) {
            if PureAck.supersedes(p, UnsafeRawBufferPointer(slot(i))) {
                coalesced &+= 1
            } else {
                // A duplicate (or an older) ACK: both go, in order.
                emit(UnsafeRawBufferPointer(slot(i)))
            }
            store(p, at: i, tag: tag)
            return true
        }
        if held == Self.slots { flush() }
        store(p, at: held, tag: tag)
        held += 1
        return true
    }

    /// `p` (a packet that is not held) is about to be written: its connection's held ACK
    /// leaves first.
    public func release(before p: UnsafeRawBufferPointer) {
        guard held > 0, let tag = PureAck.connectionTag(p) else { return }
        for i in 0..<held where tags[i] == tag && PureAck.sameConnection(p, as: UnsafeRawBufferPointer(slot(i))) {
            emit(UnsafeRawBufferPointer(slot(i)))
            remove(i)
            return
        }
    }

    /// The end of a batch: every held ACK is written.
    public func flush() {
        for i in 0..<held { emit(UnsafeRawBufferPointer(slot(i))) }
        held = 0
    }
}
