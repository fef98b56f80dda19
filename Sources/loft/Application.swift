import CLinux
import Glibc
import LoftConfig
import LoftCore
import LoftIO
import LoftInputs
import LoftNetstack
import LoftOutbounds
import LoftRouting

/// Builds the running system from a validated configuration and tears it down again.
enum Application {
    /// A configuration this build cannot carry out, said before anything starts (so loft never
    /// runs half-configured).
    static func unsupported(_ config: Configuration) -> String? {
        for o in config.outbounds {
            if case .loft = o.kind { return "\(o.position): outbound \"\(o.name)\": type loft is not available in this build" }
        }
        if let tun = config.tun, tun.netns == nil, tun.routeAll {
            return "tun.route-all: true needs tun.netns (in host mode loft's own sockets would be routed into its TUN); set route-all: false"
        }
        return nil
    }

    static func run(_ config: Configuration) -> Int32 {
        Log.threshold = switch config.log {
        case .error: .error
        case .warn: .warn
        case .info: .info
        case .debug: .debug
        }
        let nofile = clinux_raise_nofile()
        let loop: EventLoop
        do { loop = try EventLoop() } catch { Log.error("start.failed", ["error": error]); return 1 }
        let signals = SignalWatcher(loop: loop)

        let resolver = try? Resolver(loop: loop)
        var outbounds: [String: Outbound] = [
            "direct": DirectOutbound(loop: loop, resolver: resolver),
            "drop": DropOutbound(loop: loop),
        ]
        for o in config.outbounds {
            switch o.kind {
            case .direct: outbounds[o.name] = DirectOutbound(name: o.name, loop: loop, resolver: resolver)
            case .drop: outbounds[o.name] = DropOutbound(name: o.name, loop: loop)
            case .loft: break  // refused by unsupported()
            }
        }
        let router: Router
        do {
            router = try Router(rules: config.rules, defaultAction: config.defaultAction, outbounds: outbounds)
        } catch {
            Log.error("start.failed", ["error": error])
            return 2
        }

        var settings = Netstack.Settings()
        settings.icmpReply = config.tun?.icmp != .drop
        settings.maxFlows = config.limits.maxFlows
        settings.connectTimeoutMs = config.limits.connectTimeout.milliseconds
        settings.tcpIdleTimeoutMs = config.limits.tcpIdleTimeout.milliseconds
        settings.udpIdleTimeoutMs = config.limits.udpIdleTimeout.milliseconds
        let netstack = Netstack(loop: loop, router: router, settings: settings)
        loop.timerHook = { netstack.runTimers() }
        loop.addAfterEvents { netstack.afterEvents() }

        var tun: TunInput?
        if let t = config.tun {
            let input = TunInput(settings: t, loop: loop, netstack: netstack)
            do {
                try input.start()
            } catch {
                Log.error("start.failed", ["input": "tun", "error": error])
                return 1
            }
            tun = input
        }
        var socks5: Socks5Server?
        if let s = config.socks5 {
            var options = Socks5Server.Options(s)
            options.connectTimeoutMs = config.limits.connectTimeout.milliseconds
            options.idleTimeoutMs = config.limits.tcpIdleTimeout.milliseconds
            let server = Socks5Server(options: options, loop: loop, router: router)
            do {
                try server.start()
            } catch {
                Log.error("start.failed", ["input": "socks5", "error": error])
                tun?.stop()
                return 1
            }
            socks5 = server
        }
        var bridge: BridgeInput?
        if let b = config.bridge {
            let input = BridgeInput(settings: b, loop: loop, netstack: netstack)
            do {
                try input.start()
            } catch {
                Log.error("start.failed", ["input": "bridge", "error": error])
                tun?.stop()
                return 1
            }
            bridge = input
        }

        Log.info("ready", ["version": version, "pid": getpid(), "nofile": nofile, "tun": tun != nil ? "on" : "off",
                           "bridge": bridge != nil ? "on" : "off"])
        loop.run()
        Log.info("stopping", ["signal": signals.received])
        tun?.stop()
        socks5?.stop()
        bridge?.stop()
        for (name, index) in [("tun", tun?.inputIndex), ("bridge", bridge?.inputIndex)] {
            guard let index else { continue }
            let ic = netstack.inputCounters[index]
            var fields: [(String, Any)] = [("input", name), ("packets_in", ic.packetsIn), ("packets_out", ic.packetsOut)]
            for r in PacketDropReason.allCases where ic.dropped(r) > 0 { fields.append(("drop_\(r)", ic.dropped(r))) }
            if let b = bridge, name == "bridge" {
                fields += [("oversize", b.counters.oversize), ("peer_missing", b.counters.peerMissing), ("send_drops", b.counters.sendDrops)]
            }
            Log.emit(.info, "input.stats", fields)
        }
        let c = netstack.counters
        Log.info("stopped", ["packets_in": c.packetsIn, "packets_out": c.packetsOut, "tcp_flows": c.tcpFlowsOpened,
                             "udp_associations": c.udpAssociationsOpened, "drops": c.totalDrops])
        return 0
    }
}

/// SIGINT/SIGTERM/SIGHUP arrive as readable events on a signalfd and stop the loop.
final class SignalWatcher: IOHandler {
    let loop: EventLoop
    let fd: Int32
    var received: Int32 = 0

    init(loop: EventLoop) {
        self.loop = loop
        fd = clinux_signalfd_for_shutdown()
        if fd >= 0 { loop.register(fd, IOEvents.readable, self) }
    }

    func handleIO(_ events: UInt32) {
        let s = clinux_signalfd_read(fd)
        if s > 0 {
            received = s
            loop.stop()
        }
    }
}

extension Duration {
    var milliseconds: UInt64 {
        let (s, atto) = components
        return UInt64(max(0, s)) * 1000 + UInt64(max(0, atto)) / 1_000_000_000_000_000
    }
}
