import Glibc
import LoftConfig
import LoftControl
import LoftCore
import LoftDirect
import LoftCarriers
import LoftIO
import LoftInputs
import LoftNetstack
import LoftOutbounds
import LoftProtocol
import LoftRouting
import LoftSSTP
import LoftTLS

/// Builds the running system from a validated configuration and tears it down again.
enum Application {
    /// A configuration this build cannot carry out, said before anything starts (so loft never
    /// runs half-configured).
    static func unsupported(_ config: Configuration) -> String? {
        for o in config.outbounds {
            if case .vless(_, _, .caFile(let path), _, _) = o.kind, access(path, R_OK) != 0 {
                return "\(o.position): outbound \"\(o.name)\": tls.ca \(path): \(String(cString: strerror(errno)))"
            }
            if case .sstp(_, _, _, .caFile(let path), _, _) = o.kind, access(path, R_OK) != 0 {
                return "\(o.position): outbound \"\(o.name)\": tls.ca \(path): \(String(cString: strerror(errno)))"
            }
            guard case .loft(_, let carrier, _, let verification, _) = o.kind else { continue }
            if CarrierKind(rawValue: carrier) == nil {
                let built = CarrierKind.allCases.map(\.rawValue).joined(separator: ", ")
                return "\(o.position): outbound \"\(o.name)\": carrier \(carrier) is not available in this build (built: \(built))"
            }
            // A CA file that cannot be read would only fail at the first dial.
            if case .caFile(let path) = verification, access(path, R_OK) != 0 {
                return "\(o.position): outbound \"\(o.name)\": tls.ca \(path): \(String(cString: strerror(errno)))"
            }
        }
        return nil
    }

    /// `loft check`'s warnings: a file that holds a secret (a token, a UUID, a password) and that
    /// its group or others may read. One line per file.
    static func exposedSecrets(_ config: Configuration, path: String) -> [String] {
        var files: [(String, String)] = []
        for o in config.outbounds {
            switch o.kind {
            case .loft: files.append((o.position.file, "outbound \(o.name)'s token"))
            case .vless: files.append((o.position.file, "outbound \(o.name)'s UUID"))
            case .sstp: files.append((o.passwordFile ?? o.position.file, "outbound \(o.name)'s password"))
            default: break
            }
        }
        var out: [String] = []
        var seen: Set<String> = []
        for (file, what) in files where seen.insert(file).inserted {
            var st = stat()
            guard stat(file, &st) == 0, st.st_mode & 0o044 != 0 else { continue }
            let mode = String(st.st_mode & 0o777, radix: 8)
            out.append("\(file): warning: holds a secret (\(what)) and is readable by \(st.st_mode & 0o004 != 0 ? "others" : "its group") (mode 0\(mode)); chmod 600 \(file)")
        }
        return out
    }

    /// What this process lacks to carry out `config` (a capability, a folder it must write in),
    /// said before anything is created; nil when nothing is missing.
    static func privilegeProblem(_ config: Configuration) -> String? {
        var needs: [(Capability, String)] = []
        if let t = config.tun {
            needs.append((.netAdmin, "the TUN \(t.name), its addresses and routes"))
            if let ns = t.netns { needs.append((.sysAdmin, "tun.netns \"\(ns)\": ip netns add, setns")) }
        }
        let start = Privileges.unprivilegedPortStart
        let ports = [("socks5", config.socks5.map { Int($0.listen.port) }), ("metrics", config.metrics.map { Int($0.port) }),
                     ("bridge", config.bridge.map { Int($0.extensionPort) })]
        for case let (name, port?) in ports where port > 0 && port < start {
            needs.append((.netBindService, "\(name) port \(port) is below \(start)"))
        }
        if let problem = Privileges.missing(needs, program: "loft") { return problem }
        var folders: [(String, String)] = []
        if config.tun != nil { folders.append(("/run/loft", "the TUN's lock")) }
        if let t = config.tun, t.netns != nil, !t.dns.isEmpty { folders.append(("/etc/netns", "tun.dns (the namespace's resolv.conf)")) }
        let control = config.control.split(separator: "/", omittingEmptySubsequences: false).dropLast().joined(separator: "/")
        folders.append((control.isEmpty ? "/" : control, "the control socket \(config.control)"))
        for (folder, what) in folders {
            if let reason = Privileges.writable(folder) {
                let hint = folder == control ? "run as root, or set control: to a path you can write" : "run as root"
                return "loft: \(what): \(reason) (\(hint)); nothing was started"
            }
        }
        return nil
    }

    static func run(_ config: Configuration, configPath: String?) -> Int32 {
        Log.threshold = config.log.threshold
        let nofile = Syscall.raiseFileLimit()
        let loop: EventLoop
        Syscall.keepFreedMemory(upTo: Netstack.heapKept)
        do { loop = try EventLoop() } catch { Log.error("start.failed", ["error": error]); return 1 }
        let signals = SignalWatcher(loop: loop)
        signals.onShutdown = { _ in loop.stop() }
        let runtime = Runtime(config: config, configPath: configPath, loop: loop)

        // The loop's one resolver, shared by the direct outbounds and the holders' carriers.
        let resolver: Resolver
        do { resolver = try Resolver(loop: loop) } catch { Log.error("start.failed", ["resolver": error]); return 1 }
        var outbounds: [String: Outbound] = [
            "direct": DirectOutbound(loop: loop, resolver: resolver),
            "drop": DropOutbound(loop: loop),
        ]
        var carrierRuntime: CarrierRuntime?
        // The carriers' and TLS outbounds' shared runtime, made for the first that needs it.
        func sharedRuntime() throws -> CarrierRuntime {
            if let r = carrierRuntime { return r }
            let r = try CarrierRuntime(loop: loop, resolver: resolver)
            carrierRuntime = r
            return r
        }
        for o in config.outbounds {
            do {
                switch o.kind {
                case .direct: outbounds[o.name] = DirectOutbound(name: o.name, loop: loop, resolver: resolver)
                case .drop: outbounds[o.name] = DropOutbound(name: o.name, loop: loop)
                case .loft(let server, let carrier, let token, let verification, let serverName):
                    var options = try holderOptions(server: server, carrier: carrier, token: token, verification: verification,
                                                    serverName: serverName, config: config)
                    options.stateFile = o.stateFile
                    options.carrier.quicMaxPacket = o.quicMaxPacket
                    let holder = try HolderOutbound(name: o.name, loop: loop, runtime: try sharedRuntime(), options: options,
                                                    fallback: outbounds["direct"])
                    outbounds[o.name] = holder
                    runtime.holders.append(holder)
                case .sstp(let server, let user, let password, let verification, let serverName, let auth):
                    guard let hp = HostPort(server) else { throw TLSError("server must be host:port: \(server)") }
                    var options = SSTPOptions(host: hp.host, port: hp.port, tls: tlsOptions(verification, serverName: serverName),
                                              user: user, password: password,
                                              auth: auth.map { $0 == .pap ? SSTPClient.AuthMethod.pap : .mschapv2 },
                                              hold: config.hold, connectTimeoutMs: config.limits.connectTimeout.milliseconds)
                    if let k = o.keepalive { options.keepaliveMs = k.milliseconds }
                    let sstp = try SSTPOutbound(name: o.name, loop: loop, runtime: try sharedRuntime(), options: options,
                                                fallback: outbounds["direct"])
                    outbounds[o.name] = sstp
                    runtime.sstps.append(sstp)
                case .vless(let server, let uuid, let verification, let serverName, let alpn):
                    let options = try vlessOptions(server: server, uuid: uuid, verification: verification,
                                                   serverName: serverName, alpn: alpn, config: config)
                    outbounds[o.name] = try VLESSOutbound(name: o.name, loop: loop, runtime: try sharedRuntime(), options: options)
                }
            } catch {
                Log.error("start.failed", ["outbound": o.name, "error": "\(error)"])
                return 1
            }
        }
        runtime.outbounds = outbounds
        let router: Router
        do {
            router = try Router(rules: config.rules.map(Rule.init), defaultAction: Rule.Action(config.defaultAction), outbounds: outbounds)
        } catch {
            Log.error("start.failed", ["error": error])
            return 2
        }
        runtime.router = router

        var settings = Netstack.Settings()
        settings.icmpReply = config.tun?.icmp != .drop
        settings.maxFlows = config.limits.maxFlows
        settings.connectTimeoutMs = config.limits.connectTimeout.milliseconds
        settings.tcpIdleTimeoutMs = config.limits.tcpIdleTimeout.milliseconds
        settings.udpIdleTimeoutMs = config.limits.udpIdleTimeout.milliseconds
        let netstack = Netstack(loop: loop, router: router, settings: settings)
        runtime.netstack = netstack
        loop.timerHook = { netstack.runTimers() }
        loop.addAfterEvents { netstack.afterEvents() }

        // Everything started so far is undone if a later step fails.
        func abandon(_ input: String, _ error: Error) -> Int32 {
            Log.error("start.failed", ["input": input, "error": error])
            runtime.stopAll()
            return 1
        }

        do {
            runtime.control = try ControlServer(path: config.control, loop: loop) { [unowned runtime] line in
                runtime.handle(line)
            }
        } catch {
            // Several lofts may run at once (one per namespace); only the first gets the default
            // socket unless the files name their own. A path the file names must be free.
            guard config.control == Configuration.defaultControl, let fallback = try? ControlServer(
                path: "/run/loft/control.\(getpid()).sock", loop: loop, handler: { [unowned runtime] in runtime.handle($0) })
            else { return abandon("control", error) }
            Log.warn("control.fallback", ["wanted": config.control, "using": fallback.path, "reason": error])
            runtime.control = fallback
        }
        if let m = config.metrics {
            do {
                runtime.metrics = try MetricsServer(listen: m, loop: loop) { [unowned runtime] in runtime.report().prometheus() }
            } catch {
                return abandon("metrics", error)
            }
        }

        var tun: TunInput?
        if let t = config.tun {
            var plan: HostRoutes.Plan?
            if t.netns == nil {
                // Host mode: mark loft's own sockets, route rule prefixes by action.
                Sockets.outboundMark = HostRoutes.mark
                var into: [IPPrefix] = [], off: [IPPrefix] = []
                for rule in config.rules where rule.ports.isEmpty && rule.network == nil && rule.domains.isEmpty {
                    if case .direct = rule.action { off += rule.to } else { into += rule.to }
                }
                plan = HostRoutes.Plan(tun: t.name, routeAll: t.routeAll, intoTun: into, offTun: off)
            }
            let input = TunInput(settings: TunInput.Options(t), loop: loop, netstack: netstack, hostPlan: plan)
            do {
                try input.start()
            } catch {
                return abandon("tun", error)
            }
            tun = input
            runtime.tun = input
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
                return abandon("socks5", error)
            }
            socks5 = server
            runtime.socks5 = server
        }
        var bridge: BridgeInput?
        if let b = config.bridge {
            let input = BridgeInput(settings: BridgeInput.Options(b), loop: loop, netstack: netstack)
            do {
                try input.start()
            } catch {
                return abandon("bridge", error)
            }
            bridge = input
            runtime.bridge = input
        }

        // SSTP outbounds too: the first one's IPCP address goes on the TUN (no holder's STATUS
        // competes: a holder, if any, owns the overlay), and its packets come back to the TUN.
        if let tun, !runtime.sstps.isEmpty { netstack.packetModeInput = tun.inputIndex }
        for (i, sstp) in runtime.sstps.enumerated() {
            // IPCP never puts an address the TUN already has on it (HostAddress.problem); the
            // TUN's own address as /32 is what IPCP's goes on as, no change, and passes.
            sstp.reservedAddresses = [config.tun?.ipv4, config.tun?.ipv6].compactMap { $0 }
                .filter { !($0.address.isIPv4 && $0.length == 32) }.map(\.address)
            if let tun {
                if i == 0 && runtime.holders.isEmpty {
                    sstp.onLink = { [unowned tun] link in
                        guard let prefix = IPPrefix(link.address, 32) else { return }
                        // The TUN's MTU is what the link carries (the server's MRU, at most an
                        // SSTP packet's 4087), but never below IPv6's 1280: under it the netstack
                        // fits the packet flows to the link (`PacketOutbound.linkMTU`).
                        tun.applyOverlay(ipv4: prefix, gateway4: nil, ipv6: nil, gateway6: nil,
                                         mtu: max(1280, link.mtu), dns: link.dns)
                        tun.setLinkLocal(link.ipv6)
                    }
                }
                sstp.onPacket = { [unowned tun] packet in tun.writeForwarded(packet) }
            }
            // Streams routed to it (SOCKS5, the bridge) are connections lwIP opens over the link.
            sstp.linkStack = netstack.addLink(for: sstp, mtu: 1500)
            if sstp.linkStack == nil { Log.warn("sstp.no-link-netif", ["outbound": sstp.name]) }
            sstp.start()
        }

        // Holders dial once the inputs exist: the first one's STATUS sets the TUN's overlay.
        for (i, holder) in runtime.holders.enumerated() {
            if i == 0, let tun {
                holder.reservedAddresses = [config.tun?.ipv4, config.tun?.ipv6].compactMap { $0 }
                holder.onStatus = { [unowned tun] status in
                    let o = status.overlay
                    tun.applyOverlay(ipv4: o.ipv4, gateway4: o.gateway4, ipv6: o.ipv6, gateway6: o.gateway6,
                                     mtu: Int(o.mtu), dns: o.dns)
                }
            }
            holder.start()
        }
        if !runtime.holders.isEmpty || !runtime.sstps.isEmpty {
            let monitor = PathMonitor(loop: loop)
            if let t = config.tun, t.netns == nil { monitor.ignoreInterfaceIndex = Int32(bitPattern: if_nametoindex(t.name)) }
            monitor.onChange = { [unowned runtime] in
                runtime.holders.forEach { $0.pathChanged(reason: "default route") }
                runtime.sstps.forEach { $0.pathChanged(reason: "default route") }
            }
            monitor.start()
            runtime.pathMonitor = monitor
        }

        Log.info("ready", ["version": version, "pid": getpid(), "nofile": nofile, "tun": tun != nil ? "on" : "off",
                           "bridge": bridge != nil ? "on" : "off",
                           "socks5": socks5 != nil ? "on" : "off", "control": runtime.control?.path ?? "-"])
        // Under systemd (Type=notify): READY=1 once the first dial of every session has
        // settled (up, or failed and waiting), then WATCHDOG=1 from the loop's timer heap.
        let notifier = ServiceNotifier()
        if notifier.isActive {
            let sessions: [Outbound] = (runtime.holders as [Outbound]) + (runtime.sstps as [Outbound])
            let deadline = loop.currentTime + config.limits.connectTimeout.milliseconds + 1000
            func settled() {
                let dialing = sessions.contains { ["idle", "dialing"].contains($0.status.state) }
                if dialing && loop.currentTime < deadline {
                    loop.schedule(after: 20) { settled() }
                    return
                }
                notifier.ready(status: runtime.serviceStatus())
                Log.info("notify.ready", ["watchdog_ms": notifier.watchdogIntervalMs.map { "\($0)" } ?? "-"])
                notifier.startWatchdog(on: loop) { [unowned runtime] in notifier.status(runtime.serviceStatus()) }
            }
            loop.schedule(after: 0) { settled() }
        }
        loop.run()
        notifier.stopping()
        Log.info("stopping", ["signal": signals.received])
        runtime.logInputStats()
        runtime.stopAll()
        let c = netstack.counters
        Log.info("stopped", ["packets_in": c.packetsIn, "packets_out": c.packetsOut, "tcp_flows": c.tcpFlowsOpened,
                             "udp_associations": c.udpAssociationsOpened, "drops": c.totalDrops])
        return 0
    }
}

/// Holds the running parts, answers the control socket and builds status reports.
final class Runtime {
    let config: Configuration
    let configPath: String?
    let loop: EventLoop
    let started = monotonicMilliseconds()
    var outbounds: [String: Outbound] = [:]
    var router: Router?
    var netstack: Netstack?
    var tun: TunInput?
    var bridge: BridgeInput?
    var socks5: Socks5Server?
    var control: ControlServer?
    var metrics: MetricsServer?
    var holders: [HolderOutbound] = []
    var sstps: [SSTPOutbound] = []
    var pathMonitor: PathMonitor?

    init(config: Configuration, configPath: String?, loop: EventLoop) {
        self.config = config
        self.configPath = configPath
        self.loop = loop
    }

    func stopAll() {
        pathMonitor?.stop(); pathMonitor = nil
        for h in holders { h.stop() }
        for s in sstps { s.stop() }
        tun?.stop(); tun = nil
        socks5?.stop(); socks5 = nil
        bridge?.stop(); bridge = nil
        metrics?.stop(); metrics = nil
        control?.stop(); control = nil
    }

    /// One control request.
    func handle(_ line: String) -> Result<String, ControlServer.ControlError> {
        let request: ControlRequest
        switch ControlRequest.parse(line) {
        case .success(let r): request = r
        case .failure(let e): return .failure(e)
        }
        switch request {
        case .status(let format):
            let r = report()
            switch format {
            case .json: return .success(r.json.serialized + "\n")
            case .text: return .success(r.text())
            case .textWidth(let w): return .success(r.text(width: w))
            }
        case .flows(let json, let order):
            return .success(flows(json: json, order: order))
        case .metrics:
            return .success(report().prometheus())
        case .pathChanged:
            Log.info("path.changed", ["source": "control", "sessions": holders.count + sstps.count])
            if holders.isEmpty && sstps.isEmpty { return .success("no sessions to resume\n") }
            let said = holders.map { "\($0.name): \($0.pathChanged(reason: "control"))\n" }.joined()
            for s in sstps { s.pathChanged(reason: "control") }
            return .success(said + sstps.map { "\($0.name): redialling\n" }.joined())
        case .reload:
            return reload()
        }
    }

    private func flows(json: Bool, order: ControlRequest.FlowOrder) -> String {
        var rows = (netstack?.flowSnapshot() ?? []).map {
            StatusReport.Flow(network: $0.0.rawValue, source: $0.1.description, destination: $0.2.description,
                              outbound: $0.3, bytesUp: $0.4, bytesDown: $0.5, ageMs: $0.6)
        }
        switch order {
        case .age: rows.sort { $0.ageMs > $1.ageMs }
        case .up: rows.sort { $0.bytesUp > $1.bytesUp }
        case .down: rows.sort { $0.bytesDown > $1.bytesDown }
        case .bytes: rows.sort { $0.bytesUp + $0.bytesDown > $1.bytesUp + $1.bytesDown }
        }
        if json { return JSON.array(rows.map(\.json)).serialized + "\n" }
        var out = Format.pad("NET", 4) + Format.pad("SOURCE", 26) + Format.pad("DESTINATION", 26) + Format.pad("VIA", 8)
            + Format.padLeft("UP", 10) + Format.padLeft("DOWN", 10) + Format.padLeft("AGE", 10) + "\n"
        if rows.isEmpty { out += "(no live flows)\n" }
        for r in rows {
            out += Format.pad(r.network, 4) + Format.pad(r.source, 26) + Format.pad(r.destination, 26) + Format.pad(r.outbound, 8)
                + Format.padLeft(Format.bytes(r.bytesUp), 10) + Format.padLeft(Format.bytes(r.bytesDown), 10)
                + Format.padLeft(Format.duration(r.ageMs), 10) + "\n"
        }
        return out
    }

    private func reload() -> Result<String, ControlServer.ControlError> {
        guard let path = configPath else { return .failure(.init("reload: loft runs on its built-in default (no file to read)")) }
        let fresh: Configuration
        do { fresh = try ConfigLoader.load(path: path) } catch { return .failure(.init(error.description)) }
        // Outbounds are made once at start-up (docs/links.md): a change to them in the file is
        // said, not applied.
        let changed = fresh.outbounds.filter { f in
            guard let running = config.outbound(named: f.name) else { return true }
            return running.kind != f.kind || running.quicMaxPacket != f.quicMaxPacket || running.keepalive != f.keepalive
                || running.stateFile != f.stateFile
        }.map(\.name) + config.outbounds.filter { fresh.outbound(named: $0.name) == nil }.map(\.name)
        let note = changed.isEmpty ? "" : "outbounds added, changed or removed in the file (\(changed.joined(separator: ", "))) are not applied: restart loft to use them\n"
        do {
            try router?.reload(rules: fresh.rules.map(Rule.init), defaultAction: Rule.Action(fresh.defaultAction))
            netstack?.resetRuleUsage()
        } catch {
            return .failure(.init("reload: \(error)" + (note.isEmpty ? "" : "; " + note.dropLast())))
        }
        Log.info("rules.reloaded", ["rules": fresh.rules.count])
        // Only the rules and the default are applied to a running loft; anything else that
        // changed in the file is said, with what it takes.
        var kept: [String] = []
        // Where an entry is written is not a change (a rule added above it moves it).
        let sameOutbounds = fresh.outbounds.count == config.outbounds.count
            && zip(fresh.outbounds, config.outbounds).allSatisfy { var a = $0; a.position = $1.position; return a == $1 }
        if !sameOutbounds { kept.append("outbounds") }
        if fresh.tun != config.tun { kept.append("tun") }
        if fresh.socks5 != config.socks5 { kept.append("socks5") }
        if fresh.bridge != config.bridge { kept.append("bridge") }
        if fresh.limits != config.limits { kept.append("limits") }
        if fresh.hold != config.hold { kept.append("hold") }
        if fresh.control != config.control { kept.append("control") }
        if fresh.metrics != config.metrics { kept.append("metrics") }
        if fresh.log != config.log { kept.append("log") }
        var text = "rules reloaded: \(fresh.rules.count)\n" + note
        if !kept.isEmpty {
            Log.warn("reload.restart-needed", ["changed": kept.joined(separator: ",")])
            text += "changed in the file but not applied (restart loft for them; it runs with the old ones): \(kept.joined(separator: ", "))\n"
        }
        return .success(text)
    }

    /// One line for systemd's STATUS= (`systemctl status`): each input up and each session's state.
    func serviceStatus() -> String {
        var parts: [String] = []
        if let t = tun { parts.append("tun \(config.tun?.name ?? "")\(t.currentIPv4.map { " \($0)" } ?? "")") }
        if let s = config.socks5, socks5 != nil { parts.append("socks5 \(s.listen)") }
        if bridge != nil { parts.append("bridge") }
        for o in (holders as [Outbound]) + (sstps as [Outbound]) {
            let st = o.status
            parts.append("\(st.name) \(st.state)\(st.detail.isEmpty ? "" : " (\(st.detail))")")
        }
        if let ns = netstack { parts.append("\(ns.tcpStateCounts().reduce(0) { $0 + $1.1 }) tcp flows") }
        return parts.joined(separator: "; ")
    }

    func report() -> StatusReport {
        var r = StatusReport()
        r.version = version
        r.pid = getpid()
        r.uptimeMs = monotonicMilliseconds() - started
        let memory = Syscall.memoryUsage()
        r.residentBytes = memory.rss
        r.peakResidentBytes = memory.peak
        func drops(_ c: InputCounters) -> [(String, UInt64)] {
            PacketDropReason.allCases.compactMap { c.dropped($0) > 0 ? ($0.description, c.dropped($0)) : nil }
        }
        if let t = config.tun {
            let address = tun?.currentIPv4.map { ", \($0)" } ?? ""
            var i = StatusReport.Input(name: "tun", state: tun != nil ? "up" : "down",
                                       detail: "\(t.name)\(t.netns.map { " in netns \($0)" } ?? " (host)"), mtu \(tun?.currentMTU ?? t.mtu)\(address), offload \(tun?.offload.description ?? t.offload.rawValue)")
            if let tun, let ns = netstack {
                let c = ns.inputCounters[tun.inputIndex]
                i.packetsIn = c.packetsIn; i.packetsOut = c.packetsOut; i.bytesIn = c.bytesIn; i.bytesOut = c.bytesOut
                i.drops = drops(c)
                i.extra = [("write-drops", tun.writeDrops), ("acks-coalesced", tun.acksCoalesced)]
                if tun.offload.isOn {
                    i.extra += [("large-segments-in", tun.largeSegmentsRead), ("large-segments-out", tun.largeSegmentsWritten),
                                ("large-datagrams-in", tun.largeDatagramsRead)]
                }
            }
            r.inputs.append(i)
        } else {
            r.inputs.append(StatusReport.Input(name: "tun", state: "off", detail: ""))
        }
        if let b = config.bridge {
            var i = StatusReport.Input(name: "bridge", state: bridge != nil ? "up" : "down",
                                       detail: "127.0.0.1:\(b.extensionPort) <-> 127.0.0.1:\(b.peerPort), mtu \(b.mtu)")
            if let bridge, let ns = netstack {
                let c = ns.inputCounters[bridge.inputIndex]
                i.packetsIn = c.packetsIn; i.packetsOut = c.packetsOut; i.bytesIn = c.bytesIn; i.bytesOut = c.bytesOut
                i.drops = drops(c)
                i.extra = [("oversize", bridge.counters.oversize), ("peer-missing", bridge.counters.peerMissing),
                           ("send-drops", bridge.counters.sendDrops), ("acks-coalesced", bridge.counters.acksCoalesced)]
            }
            r.inputs.append(i)
        } else {
            r.inputs.append(StatusReport.Input(name: "bridge", state: "off", detail: ""))
        }
        if let s = config.socks5 {
            var i = StatusReport.Input(name: "socks5", state: socks5 != nil ? "up" : "down", detail: "\(s.listen)")
            if let socks5 {
                let c = socks5.counters
                i.packetsIn = c.udpPacketsUp; i.packetsOut = c.udpPacketsDown
                i.bytesIn = c.tcpBytesUp &+ c.udpBytesUp; i.bytesOut = c.tcpBytesDown &+ c.udpBytesDown
                i.drops = Socks5DropReason.allCases.compactMap { c.dropped($0) > 0 ? ($0.description, c.dropped($0)) : nil }
                i.extra = [("clients", UInt64(c.openClients)), ("max-clients", UInt64(c.maxClients)),
                           ("udp-associations", UInt64(c.activeAssociations)), ("clients-accepted", c.clientsAccepted),
                           ("refused-at-limit", c.refusedAtLimit), ("evicted-in-handshake", c.evictedInHandshake),
                           ("handshake-timeouts", c.handshakeTimeouts)]
            }
            r.inputs.append(i)
        } else {
            r.inputs.append(StatusReport.Input(name: "socks5", state: "off", detail: ""))
        }
        // Each outbound reports its own row; "direct" first, then by name.
        r.outbounds = outbounds.keys.sorted(by: { ($0 == "direct" ? "" : $0) < ($1 == "direct" ? "" : $1) })
            .map { outbounds[$0]!.status }
        if let ns = netstack {
            r.tcpFlowsByState = ns.tcpStateCounts()
            r.udpAssociations = ns.udpAssociationCount
            r.maxFlows = ns.settings.maxFlows
            let c = ns.counters
            r.totals = [("tcp-flows-opened", c.tcpFlowsOpened), ("tcp-connect-failures", c.tcpFlowsFailed),
                        ("link-connections-opened", c.linkConnectionsOpened),
                        ("udp-associations-opened", c.udpAssociationsOpened), ("flows-evicted", c.flowsEvicted),
                        ("flows-idle-closed", c.idleClosed), ("time-wait-reaped", c.timeWaitReaped),
                        ("handshakes-reset-by-app", c.handshakesReset), ("udp-port-unreachable-sent", c.portUnreachableSent),
                        ("icmp-rate-limited", c.icmpRateLimited), ("memory-trims", c.memoryTrims)]
            if let ctl = control {
                r.totals += [("control-refused-busy", ctl.refusedBusy), ("control-evicted-idle", ctl.evictedIdle),
                             ("control-cached-answers", ctl.cachedAnswers), ("control-paced", ctl.rateLimited)]
            }
            if let m = metrics {
                r.totals += [("metrics-evicted-idle", m.evictedIdle), ("metrics-cached-answers", m.cachedAnswers),
                             ("metrics-paced", m.rateLimited)]
            }
            r.drops = PacketDropReason.allCases.map { ($0.description, c.dropped($0)) }
            // Flows and datagrams refused while an outbound was down and held are drops too
            // (fail-closed): a "hold" row whenever some outbound keeps that counter.
            let held = r.outbounds.compactMap { $0.counter(OutboundStatus.holdDrops) }
            if !held.isEmpty { r.drops.append(("hold", held.reduce(0, &+))) }
        }
        if let router {
            let usage = netstack?.ruleUsageSnapshot() ?? [:]
            r.rules = router.rules.enumerated().map {
                var rule = StatusReport.Rule(index: $0.offset + 1, summary: Router.summary($0.element.rule), matches: $0.element.matches)
                if let u = usage[$0.offset] { rule.flows = u.flows; rule.bytesUp = u.bytesUp; rule.bytesDown = u.bytesDown }
                return rule
            }
            r.defaultMatches = router.defaultMatches
        }
        return r
    }

    func logInputStats() {
        guard let netstack else { return }
        for (name, index) in [("tun", tun?.inputIndex), ("bridge", bridge?.inputIndex)] {
            guard let index else { continue }
            let ic = netstack.inputCounters[index]
            var fields: [(String, Any)] = [("input", name), ("packets_in", ic.packetsIn), ("packets_out", ic.packetsOut)]
            for r in PacketDropReason.allCases where ic.dropped(r) > 0 { fields.append(("drop_\(r)", ic.dropped(r))) }
            if let b = bridge, name == "bridge" {
                fields += [("oversize", b.counters.oversize), ("peer_missing", b.counters.peerMissing), ("send_drops", b.counters.sendDrops), ("acks_coalesced", b.counters.acksCoalesced)]
            }
            Log.emit(.info, "input.stats", fields)
        }
    }
}

/// The TLS client options of a config's `tls` section.
func tlsOptions(_ verification: TLSVerification, serverName: String?) -> TLSClientOptions {
    var tls = TLSClientOptions(serverName: serverName)
    switch verification {
    case .caFile(let path): tls.caFile = path
    case .pinSHA256(let hex): tls.pinSHA256 = TLSClientOptions.parsePin(hex)
    case .insecure: tls.insecure = true
    case .systemStore: break // neither a CA file nor a pin: the system store (TLSClientOptions)
    }
    return tls
}

/// A `type: vless` outbound's settings as the outbound takes them.
func vlessOptions(server: String, uuid: String, verification: TLSVerification, serverName: String?,
                  alpn: [String], config: Configuration) throws -> VLESSOptions {
    guard let hp = HostPort(server) else { throw TLSError("server must be host:port: \(server)") }
    guard let id = VLESS.parseUUID(uuid) else { throw TLSError("not a UUID: \(uuid)") }
    return VLESSOptions(host: hp.host, port: hp.port, uuid: id, tls: tlsOptions(verification, serverName: serverName),
                        alpn: alpn, udpIdleTimeoutMs: config.limits.udpIdleTimeout.milliseconds,
                        connectTimeoutMs: config.limits.connectTimeout.milliseconds)
}

/// A `type: loft` outbound's settings as the holder takes them.
func holderOptions(server: String, carrier: String, token: String, verification: TLSVerification,
                   serverName: String?, config: Configuration) throws -> HolderOptions {
    // The loader accepted it as host:port; parsed again here only to split it.
    guard let hp = HostPort(server) else { throw TLSError("server must be host:port: \(server)") }
    let tls = tlsOptions(verification, serverName: serverName)
    let kind = CarrierKind(rawValue: carrier) ?? .ws
    var name = [CChar](repeating: 0, count: 256)
    gethostname(&name, name.count - 1)
    let hostName = String(decoding: name.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    return HolderOptions(
        carrier: CarrierClientOptions(kind: kind, host: hp.host, port: hp.port, tls: tls,
                                      connectTimeoutMs: config.limits.connectTimeout.milliseconds),
        token: token, clientName: "loft/\(version) \(hostName)", hold: config.hold)
}

extension Duration {
    var milliseconds: UInt64 {
        let (s, atto) = components
        return UInt64(max(0, s)) * 1000 + UInt64(max(0, atto)) / 1_000_000_000_000_000
    }
}
