import Glibc
import LoftConfig
import LoftCore

// `loft`: argument parsing and wiring only. Exit codes: 0 ok, 1 runtime failure, 2 usage or
// configuration error; errors go to stderr, one line each.

let version = "0.1.0"

let usage = """
usage: loft run [-c FILE]      run (built-in default configuration without -c)
       loft check -c FILE      validate a configuration file and exit
       loft --version | --help

The built-in default runs SOCKS5 on 127.0.0.1:11080 and the UDP bridge on
127.0.0.1:9091 <-> 9090, everything direct, no TUN. See docs/config.md.
"""

func fail(_ message: String, code: Int32) -> Never {
    var line = Array((message + "\n").utf8)
    _ = write(2, &line, line.count)
    exit(code)
}

func say(_ message: String) {
    var line = Array((message + "\n").utf8)
    _ = write(1, &line, line.count)
}

var args = Array(CommandLine.arguments.dropFirst())
guard let command = args.first else { fail(usage, code: 2) }
args.removeFirst()

func configPath(_ args: [String], required: Bool) -> String? {
    var path: String?
    var i = 0
    while i < args.count {
        switch args[i] {
        case "-c", "--config":
            guard i + 1 < args.count else { fail("loft: -c needs a file", code: 2) }
            path = args[i + 1]
            i += 2
        default:
            fail("loft: unknown argument \"\(args[i])\"\n\(usage)", code: 2)
        }
    }
    if required && path == nil { fail("loft: \(command) needs -c FILE", code: 2) }
    return path
}

func loadConfig(_ path: String?) -> Configuration {
    guard let path else { return .builtInDefault }
    do {
        return try ConfigLoader.load(path: path)
    } catch {
        fail(error.description, code: 2)
    }
}

switch command {
case "--help", "-h", "help":
    say(usage)
case "--version", "version":
    say("loft \(version)")
case "check":
    let path = configPath(args, required: true)!
    let config = loadConfig(path)
    if let problem = Application.unsupported(config) { fail("\(path): \(problem)", code: 2) }
    say("\(path): ok")
case "run":
    let config = loadConfig(configPath(args, required: false))
    if let problem = Application.unsupported(config) { fail("loft: \(problem)", code: 2) }
    exit(Application.run(config))
default:
    fail("loft: unknown command \"\(command)\"\n\(usage)", code: 2)
}
