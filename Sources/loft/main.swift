import LoftConfig
import LoftControl
import LoftCore
import LoftIO
import LoftRouting
import LoftRuntime

// `loft`: argument parsing and wiring only. Exit codes: 0 ok, 1 runtime failure, 2 usage or
// configuration error; errors go to stderr, one line each.

let version = Release.version

let usage = """
usage: loft run [-c FILE] [--log-format text|json]
                               run (built-in default configuration without -c)
       loft check [-c] FILE    validate a configuration file and exit
       loft status [-c FILE | --control SOCKET] [--json] [--wide] [--watch]
                   [--flows [--sort bytes|age|up|down]]
                               ask the running loft (its control socket: --control, else
                               FILE's `control:`, else /run/loft/control.sock)
       loft path-changed [-c FILE | --control SOCKET]   re-dial sessions after a network change
       loft reload [-c FILE | --control SOCKET]   re-read the rules of the running loft's file
       loft capture [-c FILE | --control SOCKET] [-w FILE|-] [--input tun|bridge|all]
                   [--outbound NAME] [--flow ID] [--drops] [--snaplen N] [--count N]
                   [--duration D] [--filter EXPRESSION]
                               live pcapng of the packets the TUN and the bridge carry
                               (docs/capture.md): loft capture -w - | tshark -r -
       loft exec [-c FILE] -- COMMAND [ARG...]
                               run COMMAND in the namespace the loft running FILE routes
                               (as the invoking user under sudo)
       loft try                a first run: a throwaway destination (web and DNS), the
                               namespace loft-try routed through loft, three commands to
                               paste; Ctrl-C removes all of it
       loft import SOURCE... -c FILE [--name NAME] [--replace] [--passphrase-file F]
                               add connections as outbounds: SOURCE is a link (loft://,
                               vless://, sstp://), a .loft file, an encrypted file, a PNG
                               or JPEG with QR codes, or -
       loft share NAME -c FILE [--qr | --png FILE]
                               print the outbound's link (it holds the secret), or its QR code
       loft export -c FILE [NAME...] [--encrypt [--passphrase-file F]] -o OUT
                               write connections to a .loft file (encrypted: a passphrase)
       loft -V | --version | -h | --help

The built-in default runs SOCKS5 on 127.0.0.1:11080 and the UDP bridge on
127.0.0.1:9091 <-> 9090, everything direct, no TUN. See docs/config.md; as a
system service (loft.service, loft@NAME.service): docs/service.md.
"""


let arguments = Arguments(program: "loft", usage: usage)
var args = Array(CommandLine.arguments.dropFirst())
guard let command = args.first else { Terminal.fail(usage, code: 2) }
args.removeFirst()
// `loft COMMAND --help` is help, not a usage error.
let own = args.prefix { $0 != "--" }  // after `--`: exec's command, not loft's
if own.contains("--help") || own.contains("-h") { Terminal.say(usage); Syscall.exit(0) }

/// The command's arguments (`Arguments.configPath`); `required`: without a file is a usage
/// error (exit 2).
func configPath(_ args: [String], required: Bool, positional: Bool = false, flags: Set<String> = [],
                values: Set<String> = []) -> String? {
    let path = arguments.configPath(args, positional: positional, flags: flags, values: values)
    if required && path == nil { Terminal.fail("loft: \(command) needs a configuration file: loft \(command) FILE", code: 2) }
    return path
}

func value(_ args: [String], _ name: String) -> String? { arguments.value(args, name) }

/// The control socket for the client commands: --control, else FILE's, else the default.
func controlSocket(_ args: [String], flags: Set<String> = [], values: Set<String> = []) -> String {
    let path = configPath(args, required: false, flags: flags, values: values.union(["--control"]))
    if let socket = value(args, "--control") { return socket }
    return path.map { loadConfig($0).control } ?? Configuration.defaultControl
}

func ask(_ socket: String, _ request: String) -> String {
    do {
        return try ControlClient.request(socket, request)
    } catch {
        var hint = ""
        if socket == Configuration.defaultControl, let others = otherControlSockets(), !others.isEmpty {
            hint = " (other lofts answer on \(others.joined(separator: ", ")): loft status --control SOCKET)"
        }
        Terminal.fail("loft: \(error.description)\(hint)", code: 1)
    }
}

/// The fallback sockets a second loft on the default path takes (/run/loft/control.PID.sock).
func otherControlSockets() -> [String]? {
    guard let names = Syscall.directoryEntries("/run/loft") else { return nil }
    var found: [String] = []
    for name in names where name.hasPrefix("control.") && name.hasSuffix(".sock") && name != "control.sock" {
        found.append("/run/loft/\(name)")
    }
    return found.sorted()
}

func status(_ args: [String]) -> Never {
    let socket = controlSocket(args, flags: ["--json", "--watch", "--flows", "--wide"], values: ["--sort"])
    let json = args.contains("--json")
    let wide = args.contains("--wide")
    if args.contains("--flows") {
        let sort = value(args, "--sort") ?? "bytes"
        Terminal.say(ask(socket, "flows sort=\(sort)\(json ? " json" : "")"), newline: false)
        Syscall.exit(0)
    }
    func request() -> String { json ? "status json" : "status text=\(terminalWidth(wide: wide))" }
    if !args.contains("--watch") {
        Terminal.say(ask(socket, request()), newline: false)
        Syscall.exit(0)
    }
    // Piped: one report a second, separated by a blank line, no terminal codes.
    guard Syscall.isTerminal(1) else {
        while true {
            Terminal.say(ask(socket, request()))
            Syscall.sleep(milliseconds: 1000)
        }
    }
    // Like top: redraw in place once a second until q or Ctrl-C.
    WatchTerminal.enter()
    while true {
        let body = ask(socket, request())
        let lines = body.split(separator: "\n", omittingEmptySubsequences: false)
        Terminal.say("\u{1B}[H" + lines.map { $0 + "\u{1B}[K" }.joined(separator: "\n") + "\u{1B}[J", newline: false)
        if WatchTerminal.waitForQuit(milliseconds: 1000) { WatchTerminal.leave(); Syscall.exit(0) }
    }
}

/// The width status lays its table out for: --wide (no limit), the terminal's, else $COLUMNS,
/// else 80.
func terminalWidth(wide: Bool = false) -> Int {
    if wide { return 1000 }
    var w = Syscall.terminalWidth(1)
    if w == 0, let c = Syscall.environment("COLUMNS").flatMap({ Int($0) }) { w = c }
    return w >= 40 ? min(w, 1000) : 80
}

func loadConfig(_ path: String?) -> Configuration {
    guard let path else { return .builtInDefault }
    return arguments.load(path, with: ConfigLoader.load(path:))
}

if arguments.answered(command) { Syscall.exit(0) }
switch command {
case "check":
    let path = configPath(args, required: true, positional: true)!
    let config = loadConfig(path)
    if let problem = Application.unsupported(config) { Terminal.fail(problem, code: 2) }
    // Rules that can never match are reported, not refused: the file is still valid.
    for (shadowed, by) in Router.shadowed(config.rules.map(Rule.init)) {
        let a = config.rules[shadowed].position, b = config.rules[by].position
        Terminal.say("\(a): warning: rule \(shadowed + 1) can never match: rule \(by + 1) (line \(b.line)) matches everything it would")
    }
    for warning in Application.exposedSecrets(config, path: path) { Terminal.say(warning) }
    Terminal.say("\(path): ok")
case "run":
    let path = configPath(args, required: false, values: ["--log-format"])
    if !Log.setFormat(value(args, "--log-format")) { Terminal.fail("loft: --log-format is text or json", code: 2) }
    let config = loadConfig(path)
    if let problem = Application.unsupported(config) { Terminal.fail("loft: \(problem)", code: 2) }
    if let problem = Application.privilegeProblem(config) { Terminal.fail(problem, code: 1) }
    Syscall.exit(Application.run(config, configPath: path))
case "status":
    status(args)
case "path-changed":
    Terminal.say(ask(controlSocket(args), "path-changed"), newline: false)
case "reload":
    Terminal.say(ask(controlSocket(args), "reload"), newline: false)
case "capture":
    CaptureCommand.run(args, socket: controlSocket(args, flags: CaptureCommand.flags, values: CaptureCommand.values), value: value)
case "import":
    Connections.importSources(args)
case "share":
    Connections.share(args)
case "export":
    Connections.export(args)
case "exec":
    let split = args.firstIndex(of: "--")
    let path = configPath(Array(args[..<(split ?? args.count)]), required: false)
    Exec.run(config: loadConfig(path), path: path, command: split.map { Array(args[($0 + 1)...]) } ?? [])
case "try":
    _ = configPath(args, required: false)
    if value(args, "-c") != nil { Terminal.fail("loft try: takes no -c (it writes its own configuration)", code: 2) }
    Try.run(loftBinary: Syscall.readLink("/proc/self/exe") ?? CommandLine.arguments[0])
default:
    Terminal.fail("loft: unknown command \"\(command)\"\n\(usage)", code: 2)
}
