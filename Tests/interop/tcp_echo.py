#!/usr/bin/env python3
# TCP echo on 127.0.0.1:PORT for the interop tests: echoes every byte, and on the client's
# FIN finishes its own side (shutdown SHUT_WR) once everything is written back, then closes.
#   tcp_echo.py PORT
import asyncio
import sys


async def echo(reader, writer):
    try:
        while True:
            b = await reader.read(65536)
            if not b:
                break
            writer.write(b)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
        await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()


async def main(port):
    server = await asyncio.start_server(echo, "127.0.0.1", port, reuse_address=True)
    print("listening 127.0.0.1:%d" % port, flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1])))
