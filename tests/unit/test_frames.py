"""The link's frames: what a side reads of its peer."""


def test_unread_says_whether_a_frame_waits_on_any_descriptor():
    """A side that finds its peer silent looks first whether the peer's frames wait
    unread (its own stall); past descriptor 1023 too, where select() cannot look."""
    import os
    import resource

    from mwrun.host.frames import unread

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    held = [os.open("/dev/null", os.O_RDONLY) for _ in range(max(0, min(1030, soft - 16)))]
    r, w = os.pipe()
    try:
        assert not unread(r)
        os.write(w, b"x")
        assert unread(r) and (r > 1024 or soft < 1100)
        os.read(r, 1)
        os.close(w)
        assert unread(r)  # the end of the link: read at once, never a silence
    finally:
        os.close(r)
        for fd in held:
            os.close(fd)
    assert not unread(r) and not unread(-1)  # no descriptor: nothing more comes
