import CNgtcp2
import Glibc
import LoftCore
import LoftIO

/// One stream's buffers. Bytes written stay in `send` (a ring) until the peer acknowledges
/// them (ngtcp2 retransmits from it); received bytes wait in `recv` until read, and the
/// peer's flow-control window moves on only as they are read.
final class QuicStreamState {
    let id: Int64
    // send ring: [acked, end) held, [sent, end) not yet handed to ngtcp2
    var ring: UnsafeMutableRawPointer?
    let ringCap: Int
    var acked: UInt64 = 0
    var sent: UInt64 = 0
    var end: UInt64 = 0
    var finQueued = false
    var finSent = false
    var blocked = false
    var sendClosed = false
    var wantWritable = false
    var inSendQueue = false
    /// Waits for the connection's send budget (QuicLimits.sendBudget) to free up.
    var waitsBudget = false
    /// Counts toward the send budget: every stream but 0 (the session stream, whose PING/PONG
    /// and control frames must never wait behind flows the peer does not read).
    var budgeted: Bool { id != 0 }
    // receive
    var recv = ReceiveQueue()
    /// Bytes at the front of `recv` whose credit the peer already has (h3: handed to nghttp3,
    /// their DATA payloads waiting there for the reader).
    var recvCredited = 0
    var recvFin = false
    var recvFinDelivered = false
    /// In the connection's `pendingReadable` (listed once however many packets it got).
    var inPendingReadable = false
    /// ngtcp2 closed the stream (both directions done or reset).
    var stackClosed = false
    /// Its owner let go of it (received bytes are dropped from then on).
    var released = false

    init(id: Int64, ringCap: Int) {
        self.id = id
        self.ringCap = ringCap
    }
    deinit {
        ring?.deallocate()
        recv.release()
    }

    /// Retired (reset with bytes unacknowledged): ngtcp2 may still read [acked, end), nothing
    /// else of the ring, whose other pages go back to the system (a stream whose reset the
    /// peer never completes holds its unacknowledged bytes, within the send budget, not the
    /// whole ring).
    func dropUnheldPages() {
        guard let ring, end > acked else { return }
        let start = Int(acked % UInt64(ringCap)), len = Int(end - acked)
        if start + len <= ringCap {
            Syscall.dropPages(ring, start)
            Syscall.dropPages(ring + start + len, ringCap - start - len)
        } else {
            let wrapped = start + len - ringCap
            Syscall.dropPages(ring + wrapped, start - wrapped)
        }
    }

    var held: Int { Int(end - acked) }
    var room: Int { sendClosed || finQueued ? 0 : ringCap - held }
    var unsent: Int { Int(end - sent) }
    var recvAvailable: Int { recv.available }
    var hasSendWork: Bool { !sendClosed && !blocked && (unsent > 0 || (finQueued && !finSent)) }
}
