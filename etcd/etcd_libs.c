/* dlopen of libcurl and json-c (see etcd_libs.h). */
#define RP_ETCD_LIBS_IMPL
#include "etcd_libs.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

struct rp_etcd_libs rp_etcd_libs;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int load_result = -1;
static char load_error[300];

/* The sonames bookworm ships (libcurl4 or libcurl3-gnutls, libjson-c5). */
static const char *const curl_names[] = { "libcurl.so.4", "libcurl-gnutls.so.4" };

static bool sym(void *lib, const char *name, void *out, size_t size)
{
  void *p = dlsym(lib, name);
  if (!p) {
    snprintf(load_error, sizeof load_error, "libcurl or json-c has no %s: too old?", name);
    return false;
  }
  memcpy(out, &p, size); /* a function's address from dlsym, as POSIX allows */
  return true;
}

#define SYM(lib, field, name) sym(lib, name, &rp_etcd_libs.field, sizeof rp_etcd_libs.field)

static void load(void)
{
  void *curl = NULL;
  for (size_t i = 0; !curl && i < sizeof curl_names / sizeof curl_names[0]; i++)
    curl = dlopen(curl_names[i], RTLD_NOW | RTLD_LOCAL);
  void *json = dlopen("libjson-c.so.5", RTLD_NOW | RTLD_LOCAL);
  if (!curl || !json) {
    snprintf(load_error, sizeof load_error,
             "etcd needs %s, which cannot be loaded (%s): "
             "apt-get install %s",
             curl ? "json-c" : "libcurl", dlerror(), curl ? "libjson-c5" : "libcurl4");
    return;
  }
  bool ok = SYM(curl, global_init, "curl_global_init") &&
            SYM(curl, easy_init, "curl_easy_init") &&
            SYM(curl, easy_setopt, "curl_easy_setopt") &&
            SYM(curl, easy_perform, "curl_easy_perform") &&
            SYM(curl, easy_getinfo, "curl_easy_getinfo") &&
            SYM(curl, easy_cleanup, "curl_easy_cleanup") &&
            SYM(curl, easy_strerror, "curl_easy_strerror") &&
            SYM(curl, slist_append, "curl_slist_append") &&
            SYM(curl, slist_free_all, "curl_slist_free_all") &&
            SYM(json, tokener_parse, "json_tokener_parse") &&
            SYM(json, object_get_ex, "json_object_object_get_ex") &&
            SYM(json, get_string, "json_object_get_string") &&
            SYM(json, get_int64, "json_object_get_int64") &&
            SYM(json, get_boolean, "json_object_get_boolean") &&
            SYM(json, array_length, "json_object_array_length") &&
            SYM(json, array_get_idx, "json_object_array_get_idx") &&
            SYM(json, put, "json_object_put") &&
            SYM(json, to_json_string, "json_object_to_json_string") &&
            SYM(json, is_type, "json_object_is_type");
  if (!ok)
    return;
  if (rp_etcd_libs.global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
    snprintf(load_error, sizeof load_error, "libcurl would not initialise");
    return;
  }
  load_result = 0; /* the libraries stay loaded for the life of the process */
}

int rp_etcd_libs_load(char *err, size_t errlen)
{
  pthread_once(&once, load);
  if (load_result < 0)
    snprintf(err, errlen, "%s", load_error);
  return load_result;
}
