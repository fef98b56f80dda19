import CNgtcp2
import Glibc
import LoftCore
import LoftIO

/// Where a QUIC connection's packets go: the client's own UDP socket, or the front's listening
/// socket. `bytes` holds back-to-back datagrams of `segment` bytes (the last may be shorter),
/// all for `to`. Returns false when the socket is full (EAGAIN); the sink then calls
/// `QuicConnection.socketWritable()` once it drains.
package protocol QuicPacketSink: AnyObject {
    func sendPackets(_ bytes: UnsafeRawBufferPointer, segment: Int, to: SocketAddress, from conn: QuicConnection) -> Bool
}

/// A batch of datagrams onto a UDP socket: one sendmsg with UDP_SEGMENT (GSO) where the kernel
/// takes it, else one send per datagram; received batches (UDP_GRO) cut back into datagrams.
package enum QuicSocket {
    /// Off for the process once the kernel refuses a segmented send.
    package nonisolated(unsafe) static var gso = true

    /// What became of a batch: sent (or lost like on the wire: QUIC recovers), `full` (the
    /// socket's buffer; the rest of the batch is lost), or `tooBig`: a datagram is larger than
    /// the path's MTU (EMSGSIZE: the sockets never fragment, `tune`), lost too.
    package enum Outcome { case sent, full, tooBig }

    /// `to` nil on a connected socket.
    package static func send(_ fd: Int32, _ bytes: UnsafeRawBufferPointer, segment: Int, to: SocketAddress?) -> Outcome {
        guard let base = bytes.baseAddress, bytes.count > 0 else { return .sent }
        if segment > 0 && segment < bytes.count && gso {
            switch Syscall.sendSegments(fd, base, bytes.count, segment: segment, to: to) {
            case .success: return .sent
            case .failure(let e):
                if e == .again { return .full }
                if e.code == EMSGSIZE { return .tooBig }
                guard e.code == EIO || e.code == EINVAL || e.code == EOPNOTSUPP || e.code == ENOPROTOOPT else { return .sent }
                gso = false
                Log.info("quic.gso_off", ["error": e.description])
            }
        }
        var off = 0
        let step = segment > 0 ? segment : bytes.count
        var outcome = Outcome.sent
        while off < bytes.count {
            let n = min(step, bytes.count - off)
            if case .failure(let e) = Syscall.sendSegments(fd, base + off, n, segment: 0, to: to) {
                if e == .again { return .full }
                if e.code == EMSGSIZE { outcome = .tooBig }
            }
            off += n
        }
        return outcome
    }

    /// Hands each datagram of a read of `count` bytes coalesced at `segment` (0: one) to `body`
    /// (an empty datagram too: it is counted and dropped like any malformed one). Inlinable: the
    /// carriers and the listener call it per read with a closure per datagram, which, called
    /// across the module boundary, cost the front 2% of its time in an upload (a call and a
    /// closure context per packet).
    @inlinable @inline(__always)
    package static func split(_ base: UnsafeRawPointer, _ count: Int, segment: Int, _ body: (UnsafeRawBufferPointer) -> Void) {
        if count == 0 { body(UnsafeRawBufferPointer(start: base, count: 0)); return }
        let step = segment > 0 ? segment : count
        var off = 0
        while off < count {
            let n = min(step, count - off)
            body(UnsafeRawBufferPointer(start: base + off, count: n))
            off += n
        }
    }
}
