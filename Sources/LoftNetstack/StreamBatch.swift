import CLwIP

/// What lwIP's callbacks leave for after the current batch of packets: the ends made readable
/// (bytes from apps), writable (room from ACKs), written to (one `tcp_output` each) and the
/// flows whose handshake completed (their splice attaches). lwIP's callbacks must not close or
/// abort a pcb, nor start a relay that may, so each end only queues itself here, and the loop's
/// after-events hook (`Netstack.afterEvents`, once per loop turn) runs the queues.
///
/// This is the per-turn batch, not a timer: it runs at the end of the loop turn whose packets
/// queued it, with no delay, so it is not on the timer heap.
final class StreamBatch {
    private var readable: [LwipStream] = []
    private var writable: [LwipStream] = []
    private var output: [LwipStream] = []
    private var spare: [LwipStream] = []
    private var accepted: [TCPFlow] = []
    private var spareFlows: [TCPFlow] = []

    func queueReadable(_ s: LwipStream) { readable.append(s) }
    func queueWritable(_ s: LwipStream) { writable.append(s) }
    func queueOutput(_ s: LwipStream) { output.append(s) }
    func queueAccepted(_ f: TCPFlow) { accepted.append(f) }

    /// Accepted flows first (their splices attach), then the ends' events until none are left.
    /// Each list is swapped with a spare before it runs: ends queued meanwhile run in the next
    /// round, and no array storage is reallocated.
    func run() {
        if !accepted.isEmpty {
            swap(&accepted, &spareFlows)
            for f in spareFlows { f.attach() }
            spareFlows.removeAll(keepingCapacity: true)
        }
        while !readable.isEmpty || !writable.isEmpty || !output.isEmpty {
            if !readable.isEmpty {
                swap(&readable, &spare)
                for s in spare { s.deliverReadable() }
                spare.removeAll(keepingCapacity: true)
            }
            if !writable.isEmpty {
                swap(&writable, &spare)
                for s in spare { s.deliverWritable() }
                spare.removeAll(keepingCapacity: true)
            }
            if !output.isEmpty {
                swap(&output, &spare)
                for s in spare { s.flushOutput() }
                spare.removeAll(keepingCapacity: true)
            }
        }
    }

    /// Forgets everything queued (the stack is shutting down).
    func removeAll() {
        readable.removeAll()
        writable.removeAll()
        output.removeAll()
        accepted.removeAll()
    }
}
