import LoftConfig
import LoftControl
import LoftCore
import LoftDirect
import LoftIO
import LoftInputs
import LoftNetstack
import LoftOutbounds
import LoftRouting
import LoftRuntime
import LoftSSTP
import LoftTLS

// `loft run`'s assembly: the loop, the outbounds, the router, the netstack, the control and
// metrics listeners, the inputs, the sessions; then the loop until a signal, and the shutdown.
extension Application {
    static func run(_ config: Configuration, configPath: String?) -> Int32 {
        Log.threshold = config.log.threshold
        let nofile = Syscall.raiseFileLimit()
        let loop: EventLoop
        Syscall.keepFreedMemory(upTo: Netstack.heapKept)
        do { loop = try EventLoop() } catch { Log.error("start.failed", ["error": error]); return 1 }
        let signals = SignalWatcher(loop: loop)
        signals.onShutdown = { _ in loop.stop() }
        let runtime = Runtime(config: config, configPath: configPath, loop: loop, version: version)

        // The loop's one resolver, shared by the direct outbounds and the holders' carriers.
        let resolver: Resolver
        do { resolver = try Resolver(loop: loop) } catch { Log.error("start.failed", ["resolver": error]); return 1 }
        var outbounds: [String: Outbound] = [
            "direct": DirectOutbound(loop: loop, resolver: resolver, resolvesSniffedNames: config.sniff.directResolve),
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
                case .direct: outbounds[o.name] = DirectOutbound(name: o.name, loop: loop, resolver: resolver,
                                                                 resolvesSniffedNames: config.sniff.directResolve)
                case .drop: outbounds[o.name] = DropOutbound(name: o.name, loop: loop)
                case .loft(let server, let carrier, let token, let verification, let serverName):
                    var options = try holderOptions(server: server, carrier: carrier, token: token, verification: verification,
                                                    serverName: serverName, config: config)
                    options.stateFile = o.stateFile
                    options.carrier.quicMaxPacket = o.quicMaxPacket
                    options.limits.replay = o.resumeStreams
                    options.limits.maxReplayBytes = o.resumeBuffer
                    options.carrier.multipath = o.mptcp
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
                    var options = try vlessOptions(server: server, uuid: uuid, verification: verification,
                                                   serverName: serverName, alpn: alpn, config: config)
                    options.multipath = o.mptcp
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
        settings.sniff = Netstack.Sniffing(config.sniff)
        let netstack = Netstack(loop: loop, router: router, settings: settings)
        runtime.netstack = netstack
        if let f = config.fakeIP {
            do { try runtime.startFakeIP(f, netstack: netstack) } catch { Log.error("start.failed", ["error": error]); return 1 }
        }
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
                path: "/run/loft/control.\(Syscall.processID).sock", loop: loop, handler: { [unowned runtime] in runtime.handle($0) })
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

        runtime.setUpCapture(netstack)

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
            if let t = config.tun, t.netns == nil { monitor.ignoreInterfaceIndex = Int32(bitPattern: Syscall.interfaceIndex(t.name)) }
            monitor.onChange = { [unowned runtime] in
                runtime.holders.forEach { $0.pathChanged(reason: "default route") }
                runtime.sstps.forEach { $0.pathChanged(reason: "default route") }
            }
            monitor.start()
            runtime.pathMonitor = monitor
        }

        Log.info("ready", ["version": version, "pid": Syscall.processID, "nofile": nofile, "tun": tun != nil ? "on" : "off",
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
