/// One request line of loft's control socket, parsed: `status [json|text[=WIDTH]]`,
/// `flows [json] [sort=bytes|age|up|down]`, `metrics`, `path-changed`, `reload`, `capture …`
/// (a pcapng stream; `CaptureRequest`).
public enum ControlRequest: Equatable, Sendable {
    public enum StatusFormat: Equatable, Sendable { case text, json, textWidth(Int) }
    public enum FlowOrder: String, Sendable, CaseIterable { case bytes, age, up, down }

    case status(StatusFormat)
    case flows(json: Bool, order: FlowOrder)
    case metrics
    case pathChanged
    case reload
    case capture(CaptureRequest)

    /// Whether it only reads loft's state (so a storm of it may share one render).
    public var isReadOnly: Bool {
        switch self {
        case .status, .flows, .metrics: return true
        case .pathChanged, .reload, .capture: return false
        }
    }

    /// The request, or the error answered for it.
    public static func parse(_ line: String) -> Result<ControlRequest, ControlServer.ControlError> {
        let words = line.split(separator: " ").map(String.init)
        switch words.first ?? "" {
        case "status":
            if words.count > 2 { return .failure(.init("usage: status [json|text[=WIDTH]]")) }
            let mode = words.count > 1 ? words[1] : "text"
            if mode == "json" { return .success(.status(.json)) }
            if mode == "text" { return .success(.status(.text)) }
            if mode.hasPrefix("text="), let w = Int(mode.dropFirst(5)), w >= 40, w <= 1000 { return .success(.status(.textWidth(w))) }
            return .failure(.init("status: unknown format \"\(mode)\""))
        case "flows":
            var json = false
            var sort = "bytes"
            for a in words.dropFirst() {
                if a == "json" { json = true } else if a.hasPrefix("sort=") { sort = String(a.dropFirst(5)) } else {
                    return .failure(.init("usage: flows [json] [sort=bytes|age|up|down]"))
                }
            }
            guard let order = FlowOrder(rawValue: sort) else { return .failure(.init("flows: unknown sort \"\(sort)\"")) }
            return .success(.flows(json: json, order: order))
        case "metrics":
            return .success(.metrics)
        case "path-changed":
            return .success(.pathChanged)
        case "reload":
            return .success(.reload)
        case "capture":
            return CaptureRequest.parse(line).map { .capture($0) }
        case "":
            return .failure(.init("empty request"))
        default:
            return .failure(.init("unknown command \"\(words[0].prefix(32))\" (status, flows, metrics, path-changed, reload, capture)"))
        }
    }
}
