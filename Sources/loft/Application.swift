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
            if case .vless(_, _, .caFile(let path), _, _) = o.kind, case .failure(let e) = Syscall.checkReadable(path) {
                return "\(o.position): outbound \"\(o.name)\": tls.ca \(path): \(e)"
            }
            if case .sstp(_, _, _, .caFile(let path), _, _) = o.kind, case .failure(let e) = Syscall.checkReadable(path) {
                return "\(o.position): outbound \"\(o.name)\": tls.ca \(path): \(e)"
            }
            guard case .loft(_, let carrier, _, let verification, _) = o.kind else { continue }
            if CarrierKind(rawValue: carrier) == nil {
                let built = CarrierKind.allCases.map(\.rawValue).joined(separator: ", ")
                return "\(o.position): outbound \"\(o.name)\": carrier \(carrier) is not available in this build (built: \(built))"
            }
            // A CA file that cannot be read would only fail at the first dial.
            if case .caFile(let path) = verification, case .failure(let e) = Syscall.checkReadable(path) {
                return "\(o.position): outbound \"\(o.name)\": tls.ca \(path): \(e)"
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
            guard let st_mode = Syscall.fileMode(file), st_mode & 0o044 != 0 else { continue }
            let mode = String(st_mode & 0o777, radix: 8)
            out.append("\(file): warning: holds a secret (\(what)) and is readable by \(st_mode & 0o004 != 0 ? "others" : "its group") (mode 0\(mode)); chmod 600 \(file)")
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
}
