import CLinux
import Glibc
import LoftConfig
import LoftControl
import LoftCore
import LoftRouting

// `loft`: argument parsing and wiring only. Exit codes: 0 ok, 1 runtime failure, 2 usage or
// configuration error; errors go to stderr, one line each.

let version = Release.version

let usage = """
usage: loft run [-c FILE]      run (built-in default configuration without -c)
       loft check -c FILE      validate a configuration file and exit
       loft status [-c FILE] [--json] [--watch] [--flows [--sort bytes|age|up|down]]
                               ask the running loft (its control socket: from FILE's
                               `control:`, else /run/loft/control.sock)
       loft path-changed [-c FILE]   re-dial sessions after a network change
       loft reload [-c FILE]   re-read the rules of the running loft's file
       loft --version | --help

The built-in default runs SOCKS5 on 127.0.0.1:11080 and the UDP bridge on
127.0.0.1:9091 <-> 9090, everything direct, no TUN. See docs/config.md.
"""


var args = Array(CommandLine.arguments.dropFirst())
guard let command = args.first else { Terminal.fail(usage, code: 2) }
args.removeFirst()

func configPath(_ args: [String], required: Bool, flags: Set<String> = [], values: Set<String> = []) -> String? {
    var path: String?
    var i = 0
    while i < args.count {
        switch args[i] {
        case "-c", "--config":
            guard i + 1 < args.count else { Terminal.fail("loft: -c needs a file", code: 2) }
            path = args[i + 1]
            i += 2
        case let f where flags.contains(f):
            i += 1
        case let v where values.contains(v):
            guard i + 1 < args.count else { Terminal.fail("loft: \(v) needs a value", code: 2) }
            i += 2
        default:
            Terminal.fail("loft: unknown argument \"\(args[i])\"\n\(usage)", code: 2)
        }
    }
    if required && path == nil { Terminal.fail("loft: \(command) needs -c FILE", code: 2) }
    return path
}

func value(_ args: [String], _ name: String) -> String? {
    guard let i = args.firstIndex(of: name), i + 1 < args.count else { return nil }
    return args[i + 1]
}

/// The control socket named by FILE (or the default), for the client commands.
func controlSocket(_ args: [String], flags: Set<String> = [], values: Set<String> = []) -> String {
    let path = configPath(args, required: false, flags: flags, values: values)
    return path.map { loadConfig($0).control } ?? Configuration.defaultControl
}

func ask(_ socket: String, _ request: String) -> String {
    do {
        return try ControlClient.request(socket, request)
    } catch {
        Terminal.fail("loft: \(error.description)", code: 1)
    }
}

func status(_ args: [String]) -> Never {
    let socket = controlSocket(args, flags: ["--json", "--watch", "--flows"], values: ["--sort"])
    let json = args.contains("--json")
    if args.contains("--flows") {
        let sort = value(args, "--sort") ?? "bytes"
        Terminal.say(ask(socket, "flows sort=\(sort)\(json ? " json" : "")"), newline: false)
        exit(0)
    }
    if !args.contains("--watch") {
        Terminal.say(ask(socket, json ? "status json" : "status text=\(terminalWidth())"), newline: false)
        exit(0)
    }
    // Like top: redraw in place once a second until interrupted.
    Terminal.say("\u{1B}[?25l\u{1B}[2J", newline: false)
    while true {
        let body = ask(socket, json ? "status json" : "status text=\(terminalWidth())")
        let lines = body.split(separator: "\n", omittingEmptySubsequences: false)
        Terminal.say("\u{1B}[H" + lines.map { $0 + "\u{1B}[K" }.joined(separator: "\n") + "\u{1B}[J", newline: false)
        sleep(1)
    }
}

func terminalWidth() -> Int {
    let w = Int(clinux_terminal_width(1))
    return w >= 40 ? min(w, 1000) : 80
}

func loadConfig(_ path: String?) -> Configuration {
    guard let path else { return .builtInDefault }
    do {
        return try ConfigLoader.load(path: path)
    } catch {
        Terminal.fail(error.description, code: 2)
    }
}

switch command {
case "--help", "-h", "help":
    Terminal.say(usage)
case "--version", "version":
    Terminal.say("loft \(version)")
case "check":
    let path = configPath(args, required: true)!
    let config = loadConfig(path)
    if let problem = Application.unsupported(config) { Terminal.fail(problem, code: 2) }
    // Rules that can never match are reported, not refused: the file is still valid.
    for (shadowed, by) in Router.shadowed(config.rules) {
        let a = config.rules[shadowed].position, b = config.rules[by].position
        Terminal.say("\(a): warning: rule \(shadowed + 1) can never match: rule \(by + 1) (line \(b.line)) matches everything it would")
    }
    Terminal.say("\(path): ok")
case "run":
    let path = configPath(args, required: false)
    let config = loadConfig(path)
    if let problem = Application.unsupported(config) { Terminal.fail("loft: \(problem)", code: 2) }
    if let problem = Application.privilegeProblem(config) { Terminal.fail(problem, code: 1) }
    exit(Application.run(config, configPath: path))
case "status":
    status(args)
case "path-changed":
    Terminal.say(ask(controlSocket(args), "path-changed"), newline: false)
case "reload":
    Terminal.say(ask(controlSocket(args), "reload"), newline: false)
default:
    Terminal.fail("loft: unknown command \"\(command)\"\n\(usage)", code: 2)
}
