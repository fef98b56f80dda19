// OpenSSL shim: the only C that includes OpenSSL headers.
#ifndef CTLS_H
#define CTLS_H
int ctls_version_number(void);
#endif
