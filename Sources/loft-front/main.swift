import LoftCarriers
import LoftConfig
import LoftControl
import LoftCore
import LoftFront
import LoftTLS

// `loft-front`: argument parsing and wiring only. Exit codes: 0 ok, 1 runtime failure, 2 usage
// or configuration error; errors go to stderr, one line each.

let version = Release.version

let usage = """
usage: loft-front run -c FILE [--log-format text|json]
                                  serve loft sessions as FILE says
       loft-front check [-c] FILE validate FILE (and load its certificate and key) and exit
       loft-front stats -c FILE   ask the running front (the control socket FILE names)
       loft-front -V | --version | -h | --help

SIGUSR1 logs the counters; SIGINT/SIGTERM send GOAWAY shutdown to every session and exit.
See docs/front.md; as a system service (loft-front.service): docs/service.md.
"""


let arguments = Arguments(program: "loft-front", usage: usage)
var args = Array(CommandLine.arguments.dropFirst())
guard let command = args.first else { Terminal.fail(usage, code: 2) }
args.removeFirst()
if args.contains("--help") || args.contains("-h") { Terminal.say(usage); Syscall.exit(0) }

func value(_ args: [String], _ name: String) -> String? { arguments.value(args, name) }

/// The command's configuration file (`Arguments.configPath`); without one is a usage error.
func configPath(_ args: [String], positional: Bool = false, values: Set<String> = []) -> String {
    guard let path = arguments.configPath(args, positional: positional, values: values) else {
        Terminal.fail("loft-front: \(command) needs a configuration file: loft-front \(command) -c FILE", code: 2)
    }
    return path
}

func load(_ path: String) -> FrontSettings { arguments.load(path, with: FrontConfigLoader.load(path:)) }

if arguments.answered(command) { Syscall.exit(0) }
switch command {
case "check":
    let path = configPath(args, positional: true)
    let settings = load(path)
    do {
        _ = try TLSContext(server: TLSServerOptions(certificateFile: settings.certificateFile, keyFile: settings.keyFile))
    } catch {
        Terminal.fail("\(path): tls: \(error)", code: 2)
    }
    Terminal.say("\(path): ok")
case "run":
    let settings = load(configPath(args, values: ["--log-format"]))
    if !Log.setFormat(value(args, "--log-format")) { Terminal.fail("loft-front: --log-format is text or json", code: 2) }
    // Said before anything is bound: what this process lacks for the file.
    let start = Privileges.unprivilegedPortStart
    if Int(settings.listen.port) < start, let problem = Privileges.missing(
        [(.netBindService, "listen port \(settings.listen.port) is below \(start)")], program: "loft-front") {
        Terminal.fail(problem, code: 1)
    }
    for path in [settings.control, settings.stateFile].compactMap({ $0 }) {
        let folder = path.split(separator: "/", omittingEmptySubsequences: false).dropLast().joined(separator: "/")
        if let reason = Privileges.writable(folder.isEmpty ? "." : folder) {
            Terminal.fail("loft-front: \(path): \(reason) (run as root, or as a user who may write there); nothing was started", code: 1)
        }
    }
    Syscall.exit(FrontApp.run(settings, version: version))
case "stats":
    let path = configPath(args)
    guard let socket = load(path).control else {
        Terminal.fail("\(path): no control socket is configured: add `control: /run/loft-front/control.sock` (docs/front.md) and restart the front", code: 2)
    }
    do {
        let body = try ControlClient.request(socket, "stats")
        Terminal.say(body, newline: false)
    } catch {
        Terminal.fail("loft-front: \(error.description)", code: 1)
    }
default:
    Terminal.fail("loft-front: unknown command \"\(command)\"\n\(usage)", code: 2)
}
