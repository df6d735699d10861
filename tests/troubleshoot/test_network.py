"""A port in use, named by torch and explained by the launcher; GLOO_SOCKET_IFNAME."""

import pytest

from companion.collectives.tour import whoami
from companion.runtime.launcher import LaunchError, launch
from companion.troubleshoot.network import (
    free_port,
    interfaces,
    port_taken,
    store_error,
    try_interface,
)

pytestmark = pytest.mark.ch8


def test_a_taken_port_fails_with_eaddrinuse_and_a_free_one_works():
    with port_taken() as port:
        message = store_error(port)
        assert "EADDRINUSE" in message and f"port: {port}" in message
    assert store_error(free_port()) is None


def test_launch_on_a_taken_port_says_what_to_do():
    with (
        port_taken() as port,
        pytest.raises(LaunchError, match=f"port {port} is already.*port=None"),
    ):
        launch(whoami, 2, port=port, timeout=20)


def test_gloo_uses_the_named_interface_and_names_a_missing_one():
    assert "lo" in interfaces()
    assert try_interface("lo") == "both ranks connected over lo"
    missing = try_interface("nosuch0")
    assert missing.startswith("WorkerError") and "Unable to find address for: nosuch0" in missing


def test_bad_input():
    with pytest.raises(ValueError, match="1..65535"):
        store_error(0)
    with pytest.raises(ValueError, match="interface name"):
        try_interface("")
