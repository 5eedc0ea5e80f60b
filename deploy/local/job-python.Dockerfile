FROM gridledger/python:latest
