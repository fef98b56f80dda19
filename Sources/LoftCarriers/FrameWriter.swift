import Glibc
import LoftHTTP
import LoftTLS

/// Builds ws frames or HTTP chunks in place in a TLSConnection's output buffer. Bytes written
/// in one loop iteration extend one open frame (up to 0xFFFF payload bytes); the header is
/// filled in when the frame is finalized (before each flush), so session bytes are copied once,
/// into the buffer SSL_write reads from. A client ws frame's mask key is drawn when the frame
/// opens and the bytes are masked as they are copied in (one pass, not a copy and a mask).
///
/// The header space reserved is fixed: 4 bytes for server ws frames (8 with a mask key for
/// client frames), 6 for a chunk (four hex digits and CRLF). A ws frame under 126 bytes needs
/// 2 bytes less; then the (small) frame is moved down so frames stay contiguous.
struct FrameWriter {
    enum Style { case ws(masked: Bool), chunked }

    let style: Style
    let reserve: Int
    let trailer: Int
    static let maxPayload = 0xFFFF
    /// Output space kept back from session bytes for control frames and endings.
    static let controlReserve = 256

    private(set) var open = -1
    private(set) var openLength = 0
    /// The open client ws frame's mask key (its bytes are masked as they are copied in).
    private var openKey: (UInt8, UInt8, UInt8, UInt8)?

    init(_ style: Style) {
        self.style = style
        switch style {
        case .ws(let masked): reserve = masked ? 8 : 4; trailer = 0
        case .chunked: reserve = ChunkedEncoder.headerBytes; trailer = ChunkedEncoder.trailerBytes
        }
    }

    /// Session bytes the buffer can take now.
    func writable(_ c: TLSConnection) -> Int {
        let free = c.outCap - Self.controlReserve - c.pending
        guard free > 0 else { return 0 }
        let frames = free / Self.maxPayload + 1
        return max(0, free - frames * (reserve + trailer))
    }

    mutating func write(_ c: TLSConnection, _ bytes: UnsafeRawBufferPointer) -> Int {
        guard let base = bytes.baseAddress else { return 0 }
        var taken = 0
        let limit = c.outCap - Self.controlReserve
        while taken < bytes.count {
            if open < 0 {
                let need = reserve + 1 + trailer
                if limit - c.pending < need { break }
                if c.outTail - Self.controlReserve < need { c.compactOutput() }
                open = c.outEnd
                openLength = 0
                if case .ws(masked: true) = style { openKey = keySource?() }
                c.outEnd += reserve
            }
            let byLimit = limit - c.pending - trailer
            let byTail = c.outTail - trailer
            let room = min(byLimit, byTail, Self.maxPayload - openLength)
            if room <= 0 {
                if openLength == Self.maxPayload { finalize(c); continue }
                if byTail <= 0 && byLimit > 0 {
                    open -= c.compactOutput()
                    continue
                }
                break
            }
            let n = min(room, bytes.count - taken)
            if let key = openKey {
                wsMaskCopy(c.output + c.outEnd, base + taken, n, key, phase: openLength & 3)
            } else {
                (c.output + c.outEnd).copyMemory(from: base + taken, byteCount: n)
            }
            c.outEnd += n
            openLength += n
            taken += n
        }
        return taken
    }

    /// Mask keys for client ws frames (the runtime's random pool).
    var keySource: (() -> (UInt8, UInt8, UInt8, UInt8))?

    /// Fills in the open frame's header (and mask, and chunk CRLF). Call before flushing.
    mutating func finalize(_ c: TLSConnection) {
        guard open >= 0 else { return }
        defer { open = -1; openLength = 0; openKey = nil }
        if openLength == 0 {
            c.outEnd = open
            return
        }
        switch style {
        case .chunked:
            ChunkedEncoder.writeHeader(openLength, to: c.output + open)
            c.output.storeBytes(of: 0x0D, toByteOffset: c.outEnd, as: UInt8.self)
            c.output.storeBytes(of: 0x0A, toByteOffset: c.outEnd + 1, as: UInt8.self)
            c.outEnd += 2
        case .ws:
            // The payload is masked already (in `write`).
            let key = openKey
            let h = WSFrameHeader(opcode: WSOpcode.binary, maskKey: key, payloadLength: UInt64(openLength))
            let hs = h.size
            let payload = c.output + open + reserve
            if hs < reserve {
                let gap = reserve - hs
                if open == c.outStart {
                    h.encode(to: c.output + open + gap)
                    c.outStart += gap
                } else {
                    h.encode(to: c.output + open)
                    memmove(c.output + open + hs, payload, openLength)
                    c.outEnd -= gap
                }
            } else {
                h.encode(to: c.output + open)
            }
        }
    }
}

/// The framed carriers' (ws, get) output on one TLS connection, with their core.
extension FrameWriter {
    /// Session bytes framed into `c`'s output, sent after the batch; a short write owes
    /// `carrierWritable`.
    @inline(__always)
    mutating func write<S>(_ bytes: UnsafeRawBufferPointer, to c: TLSConnection, _ core: CarrierCore<S>) -> Int {
        let n = write(c, bytes)
        core.wrote(n, of: bytes.count)
        return n
    }

    /// The open frame finished and everything buffered handed to TLS.
    mutating func flush(_ c: TLSConnection) {
        finalize(c)
        c.flush()
    }

    /// After a flush: true (once) when `carrierWritable` is owed and half of what the output
    /// takes (the control reserve aside) is free.
    func writableAgain<S>(_ c: TLSConnection, _ core: CarrierCore<S>) -> Bool {
        core.writableAgain(writable(c), of: c.outCap - Self.controlReserve)
    }
}

/// ws and get: session bytes framed (`out`) into one TLS connection's output, `outputLeg`
/// (ws: its connection; get: the client's POST, the front's GET). The contract's writing half
/// is the same for all three.
protocol FramedCarrier: CoreCarrier {
    var out: FrameWriter { get set }
    /// The connection session bytes are framed into; nil before it is there and once it is gone.
    var outputLeg: TLSConnection? { get }
    /// Session bytes may be taken now (open, and the carrier's output not ended).
    var canSend: Bool { get }
}

extension FramedCarrier {
    func write(_ bytes: UnsafeRawBufferPointer) -> Int {
        guard canSend, let c = outputLeg else { return 0 }
        return out.write(bytes, to: c, core)
    }

    var writableBytes: Int {
        guard canSend, let c = outputLeg else { return 0 }
        return out.writable(c)
    }

    var bufferedBytes: Int { outputLeg?.pending ?? 0 }

    /// After a flush: `carrierWritable` when it is owed and half the output is free.
    func afterFlush() {
        if let c = outputLeg, out.writableAgain(c, core) {
            delegate?.carrierWritable(self)
        }
    }
}
