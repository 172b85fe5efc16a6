vcl 4.1;
# Tarakan's shared page cache (docs/scaling.md "Shared cache"): Varnish 7 with varnish-modules' xkey.
#
# - Only answers that name what they show are stored: a GET/HEAD answered with an `xkey` header (space-separated
#   tags: atlas, p:<pattern key>, r:<repository id>, o:<occurrence id>) and a public Cache-Control. Anything else
#   passes, so no page can outlive a takedown here unless it carries the tags a takedown purges.
# - A takedown purges its tags (PURGE with `xkey-purge`) after its commit, before the moderator's answer; BAN
#   drops everything (the app's fallback when a tagged purge fails). Both are accepted on the listener named
#   `purge` (from loopback and the private networks compose draws from) and, when varnishd was started with an
#   unnamed listener (Varnish names it a0), from loopback there; never on `public` or any other listener. The
#   listener, not the address, is the guard: behind a load balancer on a private network every visitor arrives
#   from a private address.
# - A fetch that started before the newest purge is passed to its client but not stored: it may have read the
#   database before the takedown committed.
# - Requests with a session (privileged viewers) or in a writer's read-your-writes window never touch the cache.
#
# Compose and the tests replace the two words BACKEND_HOST and BACKEND_PORT (deploy/varnish/start.sh,
# app/devservices.py `Varnish`).

import std;
import var;
import xkey;

backend default {
    .host = "BACKEND_HOST";
    .port = "BACKEND_PORT";
    .connect_timeout = 2s;
    .first_byte_timeout = 60s;
    .between_bytes_timeout = 60s;
}

acl loopback {
    "127.0.0.0"/8;
    "::1";
}

acl purgers {
    "127.0.0.0"/8;
    "::1";
    "10.0.0.0"/8;
    "172.16.0.0"/12;
    "192.168.0.0"/16;
    "fc00::"/7;
}

sub vcl_recv {
    if (req.method == "PURGE" || req.method == "BAN") {
        if (!((local.socket == "purge" && client.ip ~ purgers)
              || (local.socket ~ "^a[0-9]+$" && client.ip ~ loopback))) {
            return (synth(403, "Forbidden"));
        }
        # before anything leaves: a fetch that started earlier is not stored (vcl_backend_response)
        # (stored as text with millisecond precision: the margin keeps an earlier fetch before it)
        var.global_set("purged_at", std.time2real(now, 0.0) + 0.01);
        if (req.method == "BAN") {
            ban("obj.status != 0");
            return (synth(200, "Banned"));
        }
        if (!req.http.xkey-purge) {
            return (synth(400, "xkey-purge header required"));
        }
        return (synth(200, "Purged " + xkey.purge(req.http.xkey-purge)));
    }
    if (req.method != "GET" && req.method != "HEAD") {
        return (pass);
    }
    # the session cookie (privileged viewers) and the read-your-writes cookie (app/kernel/security.py)
    if (req.http.Authorization || req.http.Cookie ~ "(^|;)\s*(tarakan_session|tarakan_rw)=[^;]") {
        return (pass);
    }
    # the public pages read no other cookie: without it, every anonymous visitor shares one copy
    unset req.http.Cookie;
    # the pages vary on these two and read only "true" (app/kernel/web.py is_fragment_request): any other value is
    # the same answer, so it must not make a copy of its own (a client could otherwise bust the cache at will)
    if (req.http.HX-Request != "true") {
        unset req.http.HX-Request;
    }
    if (req.http.HX-History-Restore-Request != "true") {
        unset req.http.HX-History-Restore-Request;
    }
    return (hash);
}

sub vcl_backend_fetch {
    var.set_real("fetch_started", std.time2real(now, 0.0));
}

sub vcl_backend_response {
    if (bereq.uncacheable) {
        return (deliver);
    }
    if (var.get_real("fetch_started") <= std.real(var.global_get("purged_at"), 0.0)
        || !beresp.http.xkey
        || beresp.http.Set-Cookie
        || beresp.http.Cache-Control !~ "(^|,)\s*public\s*(,|$)"
        || beresp.http.Cache-Control ~ "(private|no-store|no-cache)") {
        # hit-for-miss: the next request fetches again (and may store a tagged answer)
        set beresp.ttl = 5s;
        set beresp.uncacheable = true;
        return (deliver);
    }
    # the TTL is the answer's s-maxage (<= 300 s: the last fence behind the purges); no stale copies after it
    set beresp.grace = 0s;
    return (deliver);
}

sub vcl_deliver {
    # the tags are for this cache only
    unset resp.http.xkey;
}
