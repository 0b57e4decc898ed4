"""usage aggregate: daily partials of the lake's events and the Beam pipeline that loads them."""
