/* The client library's error and the wording of a server's refusal (client_error.h). */
#include "client_error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "rampart.pb-c.h"
#include "wire.h"

void rp_error_set(struct rp_error *err, uint16_t code, const char *fmt, ...)
{
  if (!err)
    return;
  err->code = code;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err->message, sizeof err->message, fmt, ap);
  va_end(ap);
}

const char *client_advice_text(const char *said, uint16_t status)
{
  const char *advice = rp_status_advice(status);
  return advice[0] && !strstr(said, advice) ? advice : "";
}

const char *client_advice_sep(const char *said, uint16_t status)
{
  return client_advice_text(said, status)[0] ? ": " : "";
}

void client_copy_server_message(char *out, size_t outlen, const uint8_t *payload,
                                uint32_t len, uint16_t status)
{
  Rampart__Error *e = rampart__error__unpack(NULL, len, payload);
  /* a message for a person, cut to its buffer on purpose */
  if (e && e->message && e->message[0])
    snprintf(out, outlen, "%s", e->message);
  else
    snprintf(out, outlen, "%s", rp_status_name(status));
  if (e)
    rampart__error__free_unpacked(e, NULL);
}
