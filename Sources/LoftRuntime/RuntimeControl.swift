import LoftConfig
import LoftControl
import LoftCore
import LoftRouting

// The control socket's requests as the running loft answers them (README's `loft status`, `path-changed`, `reload`):
// `ControlRequest` parses the line, `Runtime.handle` carries it out.
extension Runtime {
    /// One control request.
    public func handle(_ line: String) -> Result<String, ControlServer.ControlError> {
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
        case .capture:
            // The control server hands capture requests to the hub before this; here only
            // when nothing can be captured.
            return .failure(.init("capture: this loft has no packet input (tun or bridge) to capture"))
        }
    }

    private func flows(json: Bool, order: ControlRequest.FlowOrder) -> String {
        var rows = (netstack?.flowSnapshot() ?? []).map {
            var f = StatusReport.Flow(network: $0.network.rawValue, source: $0.source.description, destination: $0.destination.description,
                                      outbound: $0.outbound, bytesUp: $0.bytesUp, bytesDown: $0.bytesDown, ageMs: $0.ageMs)
            f.id = $0.id
            f.name = $0.name
            f.nameSource = $0.nameSource
            return f
        }
        switch order {
        case .age: rows.sort { $0.ageMs > $1.ageMs }
        case .up: rows.sort { $0.bytesUp > $1.bytesUp }
        case .down: rows.sort { $0.bytesDown > $1.bytesDown }
        case .bytes: rows.sort { $0.bytesUp + $0.bytesDown > $1.bytesUp + $1.bytesDown }
        }
        if json { return JSON.array(rows.map(\.json)).serialized + "\n" }
        // The NAME column (the name a flow was routed by, and its source) when a flow has one.
        let named = rows.contains { $0.name != nil }
        var out = Format.padLeft("ID", 8) + " " + Format.pad("NET", 4) + Format.pad("SOURCE", 26) + Format.pad("DESTINATION", 26) + Format.pad("VIA", 8)
            + Format.padLeft("UP", 10) + Format.padLeft("DOWN", 10) + Format.padLeft("AGE", 10) + (named ? "  NAME\n" : "\n")
        if rows.isEmpty { out += "(no live flows)\n" }
        for r in rows {
            out += Format.padLeft(String(r.id), 8) + " " + Format.pad(r.network, 4) + Format.pad(r.source, 26) + Format.pad(r.destination, 26) + Format.pad(r.outbound, 8)
                + Format.padLeft(Format.bytes(r.bytesUp), 10) + Format.padLeft(Format.bytes(r.bytesDown), 10)
                + Format.padLeft(Format.duration(r.ageMs), 10) + (named ? "  " + (r.name.map { "\($0) (\(r.nameSource))" } ?? "-") : "") + "\n"
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
        if fresh.sniff != config.sniff { kept.append("sniff") }
        if fresh.fakeIP != config.fakeIP { kept.append("fake-ip") }
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

}
