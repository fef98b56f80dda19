import LoftConfig
import LoftCore
import LoftIO
import LoftLinks

// `loft import`, `loft share`, `loft export` (docs/links.md). Every check is made before anything
// is written: a bad source, a name clash or a bad passphrase exits 2 with the configuration as it was.

enum Connections {
    /// The note `import` prints, and docs/links.md repeats.
    static let restartNote = "a running loft needs a restart to use new or changed outbounds: `loft reload` re-reads the rules only (outbounds, with their live sessions and links, are made once at start-up)"

    // MARK: share

    static func share(_ args: [String]) -> Never {
        var name: String?
        var config: String?
        var qr = false
        var png: String?
        var i = 0
        while i < args.count {
            switch args[i] {
            case "-c", "--config": config = argument(args, &i)
            case "--qr": qr = true; i += 1
            case "--png": png = argument(args, &i)
            case let a where !a.hasPrefix("-") && name == nil: name = a; i += 1
            default: Terminal.fail("loft: unknown argument \"\(args[i])\"\n\(usage)", code: 2)
            }
        }
        guard let name else { Terminal.fail("loft: share needs the name of an outbound", code: 2) }
        guard let config else { Terminal.fail("loft: share needs -c FILE", code: 2) }
        if qr && png != nil { Terminal.fail("loft: share takes one of --qr and --png", code: 2) }
        let c = load(config)
        guard let o = c.outbound(named: name) else {
            Terminal.fail("loft: no outbound \"\(name)\" in \(config) (defined: \(c.outbounds.map(\.name).joined(separator: ", ")))", code: 2)
        }
        let link = linkOrFail(o)
        if qr {
            guard let code = QRCode.terminal(link) else { Terminal.fail("loft: the link is too long for a QR code (\(link.utf8.count) bytes)", code: 2) }
            Terminal.say(code, newline: false)
            let columns = code.prefix { $0 != "\n" }.count
            if columns > 80 {
                warn("loft: the code is \(columns) columns wide (a \(link.count)-character link): a terminal narrower than that breaks it; --png FILE or `loft export` carry it whole")
            }
        } else if let png {
            guard let image = QRCode.png(link) else { Terminal.fail("loft: the link is too long for a QR code (\(link.utf8.count) bytes)", code: 2) }
            if let problem = writeAtomically(png, image, mode: 0o600) { Terminal.fail("loft: \(png): \(problem)", code: 1) }
            Terminal.say("wrote the QR code of \(name)'s link to \(png) (mode 0600)")
        } else {
            Terminal.say(link)
        }
        warn("loft: this link carries the secret of outbound \"\(name)\" (\(secretWord(o))): anyone who has it can connect as you\(o.stateFile != nil ? "; its state-file stays local" : "")")
        Syscall.exit(0)
    }

    static func secretWord(_ o: OutboundSettings) -> String {
        switch o.kind {
        case .loft: return "its token"
        case .vless: return "its UUID"
        case .sstp: return "its password"
        default: return "none"
        }
    }

    static func linkOrFail(_ o: OutboundSettings) -> String {
        var ca: [[UInt8]] = []
        if case .caFile(let path) = o.tlsVerification {
            guard case .success(let bytes) = readFile(path), let certs = PEM.certificates(bytes) else {
                Terminal.fail("loft: outbound \"\(o.name)\": tls.ca \(path) holds no readable PEM certificate to embed", code: 2)
            }
            ca = certs
        }
        guard let link = Link.format(o, ca: ca) else {
            Terminal.fail("loft: outbound \"\(o.name)\" is of a type with no link (only loft, vless and sstp connections have one)", code: 2)
        }
        return link
    }

    // MARK: export

    static func export(_ args: [String]) -> Never {
        var names: [String] = []
        var config: String?
        var encrypt = false
        var passphraseFile: String?
        var output: String?
        var i = 0
        while i < args.count {
            switch args[i] {
            case "-c", "--config": config = argument(args, &i)
            case "--encrypt": encrypt = true; i += 1
            case "--passphrase-file": passphraseFile = argument(args, &i)
            case "-o", "--output": output = argument(args, &i)
            case let a where !a.hasPrefix("-"): names.append(a); i += 1
            default: Terminal.fail("loft: unknown argument \"\(args[i])\"\n\(usage)", code: 2)
            }
        }
        guard let config else { Terminal.fail("loft: export needs -c FILE", code: 2) }
        guard let output else { Terminal.fail("loft: export needs -o FILE", code: 2) }
        if passphraseFile != nil && !encrypt { Terminal.fail("loft: --passphrase-file is for --encrypt", code: 2) }
        let c = load(config)
        var chosen: [OutboundSettings] = []
        if names.isEmpty {
            chosen = c.outbounds.filter { $0.tlsVerification != nil }
            guard !chosen.isEmpty else { Terminal.fail("loft: \(config) has no loft, vless or sstp outbound to export", code: 2) }
        } else {
            for n in names {
                guard let o = c.outbound(named: n) else {
                    Terminal.fail("loft: no outbound \"\(n)\" in \(config) (defined: \(c.outbounds.map(\.name).joined(separator: ", ")))", code: 2)
                }
                chosen.append(o)
            }
        }
        let text = ConnectionFile.write(chosen.map(linkOrFail))
        var bytes = Array(text.utf8)
        if encrypt {
            let pass = passphrase(file: passphraseFile, confirm: true)
            bytes = SealedFile.seal(bytes, passphrase: pass)
        }
        if let problem = writeAtomically(output, bytes, mode: 0o600) { Terminal.fail("loft: \(output): \(problem)", code: 1) }
        Terminal.say("exported \(chosen.count) connection\(chosen.count == 1 ? "" : "s") (\(chosen.map(\.name).joined(separator: ", "))) to \(output)\(encrypt ? ", encrypted" : "") (mode 0600: it holds their secrets)")
        Syscall.exit(0)
    }

    // MARK: import

    static func importSources(_ args: [String]) -> Never {
        var sources: [String] = []
        var config: String?
        var rename: String?
        var replace = false
        var passphraseFile: String?
        var i = 0
        while i < args.count {
            switch args[i] {
            case "-c", "--config": config = argument(args, &i)
            case "--name": rename = argument(args, &i)
            case "--replace": replace = true; i += 1
            case "--passphrase-file": passphraseFile = argument(args, &i)
            case "-": sources.append("-"); i += 1
            case let a where !a.hasPrefix("-"): sources.append(a); i += 1
            default: Terminal.fail("loft: unknown argument \"\(args[i])\"\n\(usage)", code: 2)
            }
        }
        guard let config else { Terminal.fail("loft: import needs -c FILE", code: 2) }
        guard !sources.isEmpty else { Terminal.fail("loft: import needs a link, a .loft file, an encrypted file, a picture or - (stdin)", code: 2) }
        let current = load(config)

        var found: [Connection] = []
        for (n, source) in sources.enumerated() {
            found += connections(from: source, index: n + 1, passphraseFile: passphraseFile)
        }
        if let rename {
            guard found.count == 1 else { Terminal.fail("loft: --name is for one connection; the sources hold \(found.count)", code: 2) }
            guard ConfigText.isOutboundName(rename) else {
                Terminal.fail("loft: --name must be 1 to 64 characters of A-Z a-z 0-9 _ . - (not direct or drop), got \"\(rename)\"", code: 2)
            }
            found[0] = found[0].renamed(rename)
        }
        var seen: Set<String> = []
        for c in found where !seen.insert(c.name).inserted {
            Terminal.fail("loft: two of the connections are named \"\(c.name)\"; import them one at a time with --name", code: 2)
        }

        // Where the outbound files go: the config's outbound-dir, or one made next to it.
        let base = directory(of: config)
        let dirKey = current.outboundDirectory == nil ? "outbounds.d" : nil
        let dir = current.outboundDirectory ?? resolve("outbounds.d", against: base)
        for c in found {
            guard let existing = current.outbound(named: c.name) else { continue }
            let inDir = existing.position.file == resolve(c.name + ".yaml", against: dir)
            if !inDir {
                Terminal.fail("loft: outbound \"\(c.name)\" is already defined at \(existing.position), outside \(dir); choose another name with --name, or edit it there", code: 2)
            }
            if !replace {
                Terminal.fail("loft: outbound \"\(c.name)\" already exists (\(existing.position.file)); --replace replaces it, --name imports under another name", code: 2)
            }
        }
        // Each file as it will be, checked with the config's own loader before anything is written.
        var files: [(path: String, bytes: [UInt8])] = []
        for c in found {
            let path = resolve(c.name + ".yaml", against: dir)
            let text = OutboundYAML.text(c.outbound, comment: "imported by `loft import`; the link: `loft share \(c.name)` (docs/links.md)")
            if c.ca.isEmpty {
                do { _ = try ConfigLoader.parseOutbound(text, file: path, baseDirectory: dir) } catch {
                    Terminal.fail("loft: connection \"\(c.name)\": \(error.description)", code: 2)
                }
            }
            if !c.ca.isEmpty { files.append((resolve(Connection.caFileName(c.name), against: dir), Array(PEM.text(c.ca).utf8))) }
            files.append((path, Array(text.utf8)))
        }
        var mainText: [UInt8]?
        var originalMain: [UInt8]?
        if let key = dirKey {
            guard case .success(var bytes) = readFile(config) else { Terminal.fail("loft: cannot read \(config)", code: 2) }
            originalMain = bytes
            if let last = bytes.last, last != UInt8(ascii: "\n") { bytes.append(UInt8(ascii: "\n")) }
            bytes += Array("\n# Outbounds added by `loft import`, one file each (docs/links.md).\noutbound-dir: \(key)\n".utf8)
            mainText = bytes
        }

        // Write: the folder, CA and outbound files (each atomically), then the main file's key.
        var created: [String] = []
        var replaced: [(String, [UInt8])] = []
        var madeDir = false
        switch Syscall.makeDirectory(dir, mode: 0o700) {
        case .success: madeDir = true
        case .failure(let e) where e != .exists: Terminal.fail("loft: cannot make \(dir): \(e)", code: 1)
        case .failure: break
        }
        func undo(_ why: String) -> Never {
            for p in created { Syscall.unlink(p) }
            for (p, old) in replaced { _ = writeAtomically(p, old, mode: 0o600) }
            if madeDir { Syscall.removeDirectory(dir) }
            Terminal.fail(why, code: 2)
        }
        for f in files {
            if case .success(let old) = readFile(f.path) { replaced.append((f.path, old)) } else { created.append(f.path) }
            if let problem = writeAtomically(f.path, f.bytes, mode: 0o600) { undo("loft: \(f.path): \(problem)") }
        }
        if let mainText {
            if let problem = writeAtomically(config, mainText, mode: nil) { undo("loft: \(config): \(problem)") }
        }
        // The whole configuration as `loft check` sees it.
        do {
            let after = try ConfigLoader.load(path: config)
            if let problem = Application.unsupported(after) { throw ConfigError(file: config, message: problem) }
        } catch {
            if let originalMain { _ = writeAtomically(config, originalMain, mode: nil) }
            undo("loft: the imported configuration does not pass `loft check`, nothing kept: \(error)")
        }
        for c in found {
            let kind: String
            switch c.outbound.kind {
            case .loft(_, let carrier, _, _, _): kind = "loft, carrier \(carrier)"
            case .vless: kind = "vless"
            case .sstp: kind = "sstp"
            default: kind = "?"
            }
            Terminal.say("imported \(c.name) (\(kind)) into \(resolve(c.name + ".yaml", against: dir))")
        }
        if mainText != nil { Terminal.say("added outbound-dir: \(dirKey!) to \(config)") }
        warn("loft: \(restartNote)")
        Syscall.exit(0)
    }

    /// The connections of one source: a link, `-`, a .loft file, an encrypted file or a picture.
    static func connections(from source: String, index: Int, passphraseFile: String?) -> [Connection] {
        if source != "-", isLink(source) {
            do { return [try Link.parse(source)] } catch {
                Terminal.fail("loft: link (argument \(index)), column \(error.column): \(error.message)", code: 2)
            }
        }
        let label = source == "-" ? "stdin" : source
        let bytes: [UInt8]
        switch source == "-" ? readFD(0) : readFile(source) {
        case .success(let b): bytes = b
        case .failure(let e): Terminal.fail("loft: cannot read \(label): \(e)", code: 2)
        }
        return connections(in: bytes, label: label, passphraseFile: passphraseFile)
    }

    static func connections(in bytes: [UInt8], label: String, passphraseFile: String?) -> [Connection] {
        if SealedFile.looksLike(bytes) {
            let pass = passphrase(file: passphraseFile, confirm: false)
            let plain: [UInt8]
            do { plain = try SealedFile.open(bytes, passphrase: pass) } catch {
                Terminal.fail("loft: \(label): \(error.description)", code: 2)
            }
            do { return try ConnectionFile.read(plain) } catch {
                Terminal.fail("loft: \(label) (decrypted): \(error.description)", code: 2)
            }
        }
        if ConnectionFile.looksLike(bytes) {
            do { return try ConnectionFile.read(bytes) } catch {
                Terminal.fail("loft: \(label):\(error.description)", code: 2)
            }
        }
        if Picture.looksLike(bytes) {
            let texts: [String]
            do { texts = try Picture.codes(bytes) } catch { Terminal.fail("loft: \(label): \(error)", code: 2) }
            return texts.enumerated().map { (n, text) -> Connection in
                do throws(LinkError) { return try Link.parse(text) } catch {
                    Terminal.fail("loft: \(label): QR code \(n + 1) of \(texts.count) is not a connection link (column \(error.column): \(error.message)): \(Link.quote(text))", code: 2)
                }
            }
        }
        // Text: one link a line (what `loft share` prints).
        guard let text = String(validating: bytes, as: UTF8.self) else {
            Terminal.fail("loft: \(label): not a link, a .loft file, an encrypted loft file or a PNG/JPEG picture", code: 2)
        }
        var out: [Connection] = []
        for (n, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let l = line.hasSuffix("\r") ? String(line.dropLast()) : String(line)
            if l.allSatisfy(\.isWhitespace) { continue }
            do { out.append(try Link.parse(l)) } catch {
                Terminal.fail("loft: \(label):\(n + 1):\(error.column): \(error.message)", code: 2)
            }
        }
        guard !out.isEmpty else { Terminal.fail("loft: \(label): no link in it", code: 2) }
        return out
    }

    static func isLink(_ s: String) -> Bool {
        let chars = Array(s.utf8)
        guard let colon = chars.firstIndex(of: UInt8(ascii: ":")), colon > 0,
              chars[colon...].starts(with: Array("://".utf8)) else { return false }
        return chars[..<colon].allSatisfy { c in
            (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(c | 0x20) || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(c)
                || c == UInt8(ascii: "+") || c == UInt8(ascii: "-") || c == UInt8(ascii: ".")
        }
    }

    // MARK: passphrase

    /// The passphrase: the first line of `file`, or asked on the terminal (twice when `confirm`).
    /// Never from the command line.
    static func passphrase(file: String?, confirm: Bool) -> [UInt8] {
        if let file {
            guard case .success(let bytes) = readFile(file) else { Terminal.fail("loft: cannot read the passphrase file \(file)", code: 2) }
            var line = Array(bytes.prefix { $0 != UInt8(ascii: "\n") })
            if line.last == UInt8(ascii: "\r") { line.removeLast() }
            guard !line.isEmpty else { Terminal.fail("loft: the first line of \(file) (the passphrase) is empty", code: 2) }
            return line
        }
        guard case .success(let tty) = Syscall.openReadWrite("/dev/tty") else {
            Terminal.fail("loft: no terminal to ask the passphrase on: give --passphrase-file FILE", code: 2)
        }
        defer { _ = Syscall.close(tty) }
        func ask(_ prompt: String) -> [UInt8] {
            // Echo off before the prompt: whatever is typed after it is never shown.
            let saved = Syscall.terminalMode(tty)
            if let saved { Syscall.setQuiet(tty, from: saved, keys: false) }
            _ = Syscall.writeAll(tty, Array(prompt.utf8))
            var line: [UInt8] = []
            var c: UInt8 = 0
            while case .success(1) = Syscall.read(tty, &c, 1), c != UInt8(ascii: "\n") { line.append(c) }
            if let saved { Syscall.setTerminalMode(tty, saved) }
            _ = Syscall.writeAll(tty, Array("\n".utf8))
            if line.last == UInt8(ascii: "\r") { line.removeLast() }
            return line
        }
        let first = ask("passphrase: ")
        guard !first.isEmpty else { Terminal.fail("loft: the passphrase is empty", code: 2) }
        if confirm, ask("passphrase again: ") != first { Terminal.fail("loft: the two passphrases differ", code: 2) }
        return first
    }

    // MARK: files

    static func argument(_ args: [String], _ i: inout Int) -> String {
        guard i + 1 < args.count else { Terminal.fail("loft: \(args[i]) needs a value", code: 2) }
        defer { i += 2 }
        return args[i + 1]
    }

    static func load(_ path: String) -> Configuration {
        do { return try ConfigLoader.load(path: path) } catch { Terminal.fail(error.description, code: 2) }
    }

    static func warn(_ message: String) {
        _ = Syscall.writeAll(2, Array((message + "\n").utf8))
    }

    enum Read { case success([UInt8]), failure(String) }

    static let maxFile = 64 << 20

    static func readFile(_ path: String) -> Read { read(Syscall.readFile(path, upTo: maxFile)) }

    static func readFD(_ fd: Int32) -> Read { read(Syscall.readAll(fd, upTo: maxFile)) }

    private static func read(_ r: Result<[UInt8], Errno>) -> Read {
        switch r {
        case .success(let bytes) where bytes.count > maxFile: return .failure("larger than 64 MiB")
        case .success(let bytes): return .success(bytes)
        case .failure(let e): return .failure(e.description)
        }
    }

    /// Writes a temporary file next to `path` and renames it over: a reader sees the old file or
    /// the new one. `mode` nil keeps the old file's mode (0600 for a new one).
    static func writeAtomically(_ path: String, _ bytes: [UInt8], mode: UInt32?) -> String? {
        var m: UInt32 = mode ?? 0o600
        if mode == nil, let old = Syscall.fileMode(path) { m = old & 0o7777 }
        let tmp = resolve(".\(basename(path)).\(Syscall.processID).tmp", against: directory(of: path))
        let fd: Int32
        switch Syscall.createExclusive(tmp, mode: m) {
        case .success(let f): fd = f
        case .failure(let e): return "cannot write \(tmp): \(e)"
        }
        Syscall.setMode(fd, m)
        if case .failure(let e) = Syscall.writeAll(fd, bytes) { _ = Syscall.close(fd); Syscall.unlink(tmp); return e.description }
        if case .failure(let e) = Syscall.sync(fd) { Syscall.unlink(tmp); return e.description }
        if case .failure(let e) = Syscall.close(fd) { Syscall.unlink(tmp); return e.description }
        if case .failure(let e) = Syscall.rename(tmp, to: path) { Syscall.unlink(tmp); return e.description }
        return nil
    }

    static func basename(_ path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return path }
        return String(path[path.index(after: slash)...])
    }

    static func directory(of path: String) -> String { ConfigLoader.directory(of: path) }

    static func resolve(_ relative: String, against base: String) -> String { ConfigLoader.resolve(relative, against: base) }
}
