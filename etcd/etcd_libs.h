/* libcurl and json-c, loaded with dlopen the first time an etcd client is made, so a
 * process that never talks to etcd (rampartd without --etcd, a pager with a server
 * list) maps neither them nor the thirty libraries libcurl brings: in a daemon locked
 * in memory that is 4.5 MiB resident (docs/dependencies.md).
 *
 * Files of this directory include this header after <curl/curl.h> and <json-c/json.h>
 * would be: the library calls are renamed to the loaded functions, so the code reads as
 * ordinary libcurl and json-c.
 *
 * Errors: -1 with a sentence in err (CONTRIBUTING.md, convention 1).
 */
#ifndef RAMPART_ETCD_LIBS_H
#define RAMPART_ETCD_LIBS_H

#include <stddef.h>

#include <curl/curl.h>
#include <json-c/json.h>

struct rp_etcd_libs {
  __typeof__(curl_global_init) *global_init;
  __typeof__(curl_easy_init) *easy_init;
  CURLcode (*easy_setopt)(CURL *curl, CURLoption option, ...);
  __typeof__(curl_easy_perform) *easy_perform;
  CURLcode (*easy_getinfo)(CURL *curl, CURLINFO info, ...);
  __typeof__(curl_easy_cleanup) *easy_cleanup;
  __typeof__(curl_easy_strerror) *easy_strerror;
  __typeof__(curl_slist_append) *slist_append;
  __typeof__(curl_slist_free_all) *slist_free_all;
  __typeof__(json_tokener_parse) *tokener_parse;
  __typeof__(json_object_object_get_ex) *object_get_ex;
  __typeof__(json_object_get_string) *get_string;
  __typeof__(json_object_get_int64) *get_int64;
  __typeof__(json_object_get_boolean) *get_boolean;
  __typeof__(json_object_array_length) *array_length;
  __typeof__(json_object_array_get_idx) *array_get_idx;
  __typeof__(json_object_put) *put;
  __typeof__(json_object_to_json_string) *to_json_string;
  __typeof__(json_object_is_type) *is_type;
};

extern struct rp_etcd_libs rp_etcd_libs;

/* Loads both libraries once (thread-safe); 0, or -1 with err naming the package to
 * install. */
int rp_etcd_libs_load(char *err, size_t errlen);

#ifndef RP_ETCD_LIBS_IMPL
#undef curl_easy_setopt
#undef curl_easy_getinfo
#define curl_global_init rp_etcd_libs.global_init
#define curl_easy_init rp_etcd_libs.easy_init
#define curl_easy_setopt rp_etcd_libs.easy_setopt
#define curl_easy_perform rp_etcd_libs.easy_perform
#define curl_easy_getinfo rp_etcd_libs.easy_getinfo
#define curl_easy_cleanup rp_etcd_libs.easy_cleanup
#define curl_easy_strerror rp_etcd_libs.easy_strerror
#define curl_slist_append rp_etcd_libs.slist_append
#define curl_slist_free_all rp_etcd_libs.slist_free_all
#define json_tokener_parse rp_etcd_libs.tokener_parse
#define json_object_object_get_ex rp_etcd_libs.object_get_ex
#define json_object_get_string rp_etcd_libs.get_string
#define json_object_get_int64 rp_etcd_libs.get_int64
#define json_object_get_boolean rp_etcd_libs.get_boolean
#define json_object_array_length rp_etcd_libs.array_length
#define json_object_array_get_idx rp_etcd_libs.array_get_idx
#define json_object_put rp_etcd_libs.put
#define json_object_to_json_string rp_etcd_libs.to_json_string
#define json_object_is_type rp_etcd_libs.is_type
#endif

#endif
