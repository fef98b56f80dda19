import LoftControl
import LoftCore
import LoftIO
import LoftInputs
import LoftNetstack
import LoftRouting

// What `loft status`, `loft status --json` and the metrics scrape show: one `StatusReport` built
// from the running parts.
extension Runtime {
    public func report() -> StatusReport {
        var r = StatusReport()
        r.version = version
        r.pid = Syscall.processID
        r.uptimeMs = loop.currentTime - started
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
                        ("handshakes-reset-by-app", c.handshakesReset), ("sniffed", c.sniffed), ("sniff-timed-out", c.sniffTimedOut),
                        ("not-sniffable", c.notSniffable), ("dns-names-learned", ns.dnsNamesLearned), ("udp-port-unreachable-sent", c.portUnreachableSent),
                        ("icmp-rate-limited", c.icmpRateLimited), ("memory-trims", c.memoryTrims)]
            if let fake = ns.fakeIP {
                r.totals += [("fake-ip-answers", fake.answers), ("fake-ip-refused", fake.refused),
                             ("fake-ip-names", UInt64(fake.pool.count))]
            }
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
        r.captures = capture?.status ?? []
        return r
    }

}
