"""The ``gridledger`` command line, on click; each command group lives in its own module.

How to add a command (or a group of them):

1. Write ``services/cli/<group>.py`` with click commands. Keep the work in
   plain functions the command calls; the command parses, calls and prints.
   Commands that talk to the API take ``@api_options`` (``--token``, ``--api``,
   and a ``conn`` argument whose ``conn.client`` is the HTTP client); every
   command that prints a result takes ``@output_options`` (``-o
   json|yaml|table`` and ``--json``, and an ``out`` argument) and prints with
   ``out.emit(data, text=function_that_renders_the_table_form)``, so JSON and
   YAML come for free. Tables go through ``render.table`` (rich on a terminal,
   plain aligned text when piped).
2. Return the exit code from the command; raise ``GridledgerError`` (or a
   subclass) for an error the user can fix, with a message that says how.
   Usage mistakes are click's (``click.BadParameter``, ``click.UsageError``).
3. End the module with ``COMMANDS = (command, ...)`` and add one row per command
   to ``COMMANDS`` in ``services/cli/main.py``: its name, its module and the line
   ``gridledger --help`` shows (the one place for it: no ``short_help=`` here).
   The module is imported only when its command runs, so ``--help`` and TAB
   completion stay fast: import heavy things (the agent, docker, boto3, faust,
   asyncpg, the Kafka client) inside the command's function, not at the top
   (``tests/cli/test_lazy.py`` checks it).
4. Test it through ``services.cli.main.main([...])`` (see ``tests/cli``).

Minimal example::

    import click

    from services.cli.options import Connection, Output, api_options, output_options

    @click.command("outputs")
    @click.argument("job")
    @api_options
    @output_options
    def outputs(conn: Connection, out: Output, job: str) -> int:
        \"\"\"The outputs JOB stored, with their sizes.\"\"\"
        out.emit(conn.client.get(f"/v1/jobs/{job}/outputs"), text=render_outputs)
        return 0

    COMMANDS = (outputs,)

and in ``services/cli/main.py``::

    "outputs": ("services.cli.artifacts", "a job's stored outputs and checkpoints"),
"""
