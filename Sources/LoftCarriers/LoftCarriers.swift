// Carriers: TLS, WebSocket and HTTP/1.1 GET/POST channels for loft sessions.
