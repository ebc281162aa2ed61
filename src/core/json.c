#include "config.h"

#include <string.h>

#include "core/buf.h"
#include "core/json.h"

int json_escape(struct buf *b, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    size_t i, run = 0;
    int rc = buf_append(b, "\"", 1);

    for (i = 0; i < n && rc == 0; i++) {
        unsigned char c = (unsigned char)s[i];
        char esc[6];
        size_t elen = 0;

        if (c == '"' || c == '\\') {
            esc[0] = '\\';
            esc[1] = (char)c;
            elen = 2;
        } else if (c == '\n') {
            memcpy(esc, "\\n", 2);
            elen = 2;
        } else if (c == '\r') {
            memcpy(esc, "\\r", 2);
            elen = 2;
        } else if (c == '\t') {
            memcpy(esc, "\\t", 2);
            elen = 2;
        } else if (c < 0x20 || c == 0x7f) {
            memcpy(esc, "\\u00", 4);
            esc[4] = hex[c >> 4];
            esc[5] = hex[c & 15];
            elen = 6;
        }
        if (elen == 0) {
            run++;
            continue;
        }
        rc = buf_append(b, s + i - run, run);
        run = 0;
        if (rc == 0)
            rc = buf_append(b, esc, elen);
    }
    if (rc == 0)
        rc = buf_append(b, s + n - run, run);
    if (rc == 0)
        rc = buf_append(b, "\"", 1);
    return rc;
}

int json_str(struct buf *b, const char *s)
{
    return json_escape(b, s ? s : "", s ? strlen(s) : 0);
}
