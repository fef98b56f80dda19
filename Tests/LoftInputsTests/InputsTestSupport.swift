import Glibc
import LoftCore
import LoftIO
import LoftNetstack

/// Sends every flow the same way and keeps the requests.
final class OneWayRouter: FlowRouter {
    let decision: RouteDecision
    var requests: [FlowRequest] = []
    init(_ decision: RouteDecision) { self.decision = decision }
    func route(_ request: FlowRequest) -> RouteMatch {
        requests.append(request)
        return RouteMatch(decision, rule: 0)
    }
}

/// A netstack on `loop` that sends every flow to `outbound`, with the loop's hooks the
/// application sets (lwIP's timers, the after-events work). Shut it down at the end.
func netstack(on loop: EventLoop, to outbound: Outbound) -> Netstack {
    let n = Netstack(loop: loop, router: OneWayRouter(.outbound(outbound)), settings: Netstack.Settings())
    loop.timerHook = { [weak n] in n?.runTimers() ?? 1000 }
    loop.addAfterEvents { [weak n] in n?.afterEvents() }
    return n
}

/// One datagram waiting on `fd`, or nil when none is.
func receiveDatagram(_ fd: Int32) -> [UInt8]? {
    var buf = [UInt8](repeating: 0, count: 65536)
    let n = buf.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT)) }
    return n > 0 ? Array(buf[0..<n]) : nil
}
